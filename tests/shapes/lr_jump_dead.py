"""A small CNN on synthetic 4-class images, SGD with momentum at a learning rate of 0.8
(meant to be 0.08): the loss rises instead of falling and a ReLU layer dies in training
(alive at the first activation samples, dead from step 30).

    python lr_jump_dead.py [--steps N] [--lr LR]
"""

import argparse

import torch
import torch.nn as nn

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=120)
ap.add_argument("--lr", type=float, default=0.8)
args = ap.parse_args()
torch.manual_seed(0)

protos = torch.randn(4, 1, 12, 12)


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    y = torch.randint(0, 4, (32,))
    return protos[y] + 0.5 * torch.randn(32, 1, 12, 12), y


model = nn.Sequential(
    nn.Conv2d(1, 8, 3, padding=1),
    nn.ReLU(),
    nn.Conv2d(8, 16, 3, padding=1),
    nn.ReLU(),
    nn.AdaptiveAvgPool2d(1),
    nn.Flatten(),
    nn.Linear(16, 32),
    nn.ReLU(),
    nn.Linear(32, 4),
)
opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
for step in range(args.steps):
    x, y = batch()
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 20 == 0:
        print(f"step {step} loss {loss.item():.4f}")
