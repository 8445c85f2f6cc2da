"""Regression of house prices with a hand-written squared error. The loop never clears the
gradients: each step applies the sum of every step's gradient so far."""

import argparse

import torch
from data import load
from model import PriceNet

ap = argparse.ArgumentParser()
ap.add_argument("--epochs", type=int, default=4)
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--lr", type=float, default=0.01)
args = ap.parse_args()

torch.manual_seed(0)
x, y = load()
net = PriceNet()
sgd = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)
for epoch in range(args.epochs):
    order = torch.randperm(len(x))
    for b in range(0, len(x), args.batch):
        idx = order[b : b + args.batch]
        err = ((net(x[idx]) - y[idx]) ** 2).mean()
        err.backward()
        sgd.step()
    print(f"epoch {epoch} mse {err.item():.4f}")
print(f"loss {err.item():.4f}")
