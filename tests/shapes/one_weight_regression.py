"""A healthy one-weight linear regression (y = 3x + noise), plain SGD on single samples:
the gradient of one weight is large when the sample is, and the loss is one sample's.

    python one_weight_regression.py [--steps N]
"""

import argparse

import torch
import torch.nn as nn

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=300)
args = ap.parse_args()
torch.manual_seed(0)

model = nn.Linear(1, 1, bias=False)
opt = torch.optim.SGD(model.parameters(), lr=0.02)
for step in range(args.steps):
    x = torch.randn(1, 1) * 2
    y = 3 * x + 0.3 * torch.randn(1, 1)
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 100 == 0:
        print(f"step {step} loss {loss.item():.4f} w {model.weight.item():.3f}")
print(f"w = {model.weight.item():.3f}")
