"""Early stopping by sys.exit(3) inside the loop, after writing the best checkpoint."""
import sys

import torch
import torch.nn as nn

from _zoo import seed, watching

seed(19)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with watching(model, opt):
    for step in range(100):
        x = torch.randn(32, 4)
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if loss.item() < 0.05:
            with open("best.txt", "w") as f:
                f.write(f"{step} {loss.item():.4f}\n")
            print("stopping early at", step)
            sys.exit(3)
print("never converged")
