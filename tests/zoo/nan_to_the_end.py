"""A mixture-density network at a learning rate 30x too high: its loss blows up at step 1,
comes back, and is NaN from step 56 to the last (200); the program prints it, exits 0."""
import math

import torch
import torch.nn as nn

from _zoo import seed, watching


class MDN(nn.Module):
    def __init__(self, k=3):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(1, 24), nn.Tanh())
        self.pi, self.mu, self.sigma = nn.Linear(24, k), nn.Linear(24, k), nn.Linear(24, k)

    def forward(self, x):
        h = self.body(x)
        return torch.softmax(self.pi(h), -1), self.mu(h), torch.exp(self.sigma(h))


def nll(pi, mu, sigma, y):
    p = torch.exp(-0.5 * ((y - mu) / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi))
    return -torch.log((pi * p).sum(-1)).mean()


seed(3)
model = MDN()
opt = torch.optim.Adam(model.parameters(), lr=0.29)
with watching(model, opt):
    for step in range(200):
        x = torch.rand(64, 1) * 4 - 2
        y = torch.sin(2 * x) + 0.1 * torch.randn_like(x)
        loss = nll(*model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 0:
            print(step, f"{loss.item():.4f}")
print("last", f"{loss.item():.4f}")
