"""A sine-wave regressor trained with LBFGS at lr 80 (meant to be 0.8): within the first
step's closure calls the loss goes 0.5 -> 1e4 -> ... -> inf.

    python lbfgs_lr80.py [--steps N] [--lr LR]
"""

import argparse

import torch
import torch.nn as nn

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--lr", type=float, default=80.0)
args = ap.parse_args()
torch.manual_seed(0)

x = torch.linspace(-3, 3, 200).unsqueeze(1)
y = torch.sin(2 * x)
model = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 1))
opt = torch.optim.LBFGS(model.parameters(), lr=args.lr)
for _ in range(args.steps):

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        print("loss:", loss.item())
        loss.backward()
        return loss

    opt.step(closure)
