"""Lookahead as its popular implementation writes it: an Optimizer subclass that never calls
Optimizer.__init__, shares its base optimizer's param_groups and calls the base's step
inside its own."""
from collections import defaultdict

import torch
import torch.nn as nn

from _zoo import seed, watching


class Lookahead(torch.optim.Optimizer):
    def __init__(self, optimizer, k=5, alpha=0.5):
        self.optimizer, self.k, self.alpha, self.count = optimizer, k, alpha, 0
        self.param_groups = self.optimizer.param_groups
        self.defaults = self.optimizer.defaults
        self.state = defaultdict(dict)
        self.slow = [p.detach().clone() for g in self.param_groups for p in g["params"]]

    def zero_grad(self, set_to_none=True):
        self.optimizer.zero_grad(set_to_none)

    @torch.no_grad()
    def step(self, closure=None):
        loss = self.optimizer.step(closure)
        self.count += 1
        if self.count % self.k == 0:
            fast = [p for g in self.param_groups for p in g["params"]]
            for s, p in zip(self.slow, fast):
                s.add_(p - s, alpha=self.alpha)
                p.copy_(s)
        return loss


seed(31)
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
opt = Lookahead(torch.optim.Adam(model.parameters(), lr=1e-2))
with watching(model, opt):
    for step in range(30):
        x = torch.randn(16, 4)
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
print("lookahead steps", opt.count, "loss", f"{loss.item():.4f}")
