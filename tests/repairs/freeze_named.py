"""Fits a small regressor to a wavy function; a fine-tuning recipe left in freezes all but the
head, which cannot fit the waves on the random features beneath it."""

import torch
from torch import nn

torch.manual_seed(4)
net = nn.Sequential(nn.Linear(1, 64), nn.Tanh(), nn.Linear(64, 8), nn.Tanh(), nn.Linear(8, 1))
net.requires_grad_(False)  # fine-tune the head only
net[-1].requires_grad_(True)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x = torch.linspace(-3, 3, 256)[:, None]
y = torch.sin(3 * x) + 0.3 * torch.cos(7 * x)
for step in range(600):
    loss = nn.functional.mse_loss(net(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 200 == 0:
        print(f"step {step} mse {loss.item():.4f}")
print(f"final mse {loss.item():.4f}")
