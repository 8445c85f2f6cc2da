"""A regression whose loader yields one corrupted batch: at step 60 the targets are x1000
(a unit bug in one shard); the loss is back to normal at the next step. Adam at lr 3e-3.

    python corrupted_batch.py [--steps N]
"""

import argparse

import torch
import torch.nn as nn

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=150)
args = ap.parse_args()
torch.manual_seed(0)

true_w = torch.randn(8, 1)


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(32, 8)
    y = x @ true_w + 0.1 * torch.randn(32, 1)
    if step == 60:
        y = y * 1000.0  # the corrupted shard
    return x, y


model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for step in range(args.steps):
    x, y = batch(step)
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 25 == 0:
        print(f"step {step} loss {loss.item():.4f}")
