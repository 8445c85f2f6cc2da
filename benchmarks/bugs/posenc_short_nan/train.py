"""Sequence regression, a bucket of equal-length sequences a step. The relative position divides by the length
minus one: a sequence of one reading divides 0 by 0."""

import argparse

import torch
import torch.nn.functional as F
from data import load
from model import Pooler

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=600)
args = ap.parse_args()

torch.manual_seed(0)
data = load()
model = Pooler()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for step in range(args.steps):
    x, y = data[step % len(data)]
    loss = F.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 100 == 0:
        print(f"step {step} loss {loss.item():.4f}")
print(f"loss {loss.item():.4f}")
