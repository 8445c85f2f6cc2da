"""Demand regression trained by a hand-written SGD step, the gradient clipped by a flag. Run
with ``--max-grad-norm inf`` (clipping "off" for an experiment), the step at lr 0.2 is too
large for the unnormalised targets and the loss blows up within a few steps."""

import argparse

import torch
from data import load
from model import Demand

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=300)
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--max-grad-norm", type=float, default=1.0)
args = ap.parse_args()

torch.manual_seed(0)
x, y = load()
net = Demand()
for step in range(args.steps):
    idx = torch.randint(0, len(x), (args.batch,))
    pred = net(x[idx])
    mse = (pred - y[idx]).pow(2).mean()
    net.zero_grad()
    mse.backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), args.max_grad_norm)
    with torch.no_grad():
        for w in net.parameters():
            w.add_(w.grad, alpha=-0.2)
    if step % 50 == 0:
        print(f"step {step} mse {mse.item():.4f}")
print(f"loss {mse.item():.4f}")
