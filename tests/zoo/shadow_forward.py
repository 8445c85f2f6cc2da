"""The forward is switched by assigning `self.forward` per phase (an instance attribute
over the class's method), as some training frameworks do."""
import torch
import torch.nn as nn

from _zoo import seed, watching


class TwoPhase(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(5, 5)
        self.head = nn.Linear(5, 1)
        self.forward = self.warmup

    def warmup(self, x):
        return self.head(x)

    def full(self, x):
        return self.head(torch.relu(self.body(x)))


seed(4)
model = TwoPhase()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
with watching(model, opt):
    for step in range(40):
        if step == 20:
            model.forward = model.full
            print("phase: full")
        x = torch.randn(32, 5)
        loss = (model(x) - x[:, :1] * 2).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
print("final", f"{loss.item():.4f}")
