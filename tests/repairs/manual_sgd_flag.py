"""Fits a curve with plain gradient descent written by hand; the rate's default is 100x too
high."""

import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=300)
parser.add_argument(
    "--learning-rate", type=float, default=8.0, help="step size of the hand-written update"
)
args = parser.parse_args()

torch.manual_seed(9)
w1, b1 = torch.randn(1, 32) * 0.5, torch.zeros(32)
w2, b2 = torch.randn(32, 1) * 0.2, torch.zeros(1)
params = [w1, b1, w2, b2]
for p in params:
    p.requires_grad_(True)
x = torch.linspace(-2, 2, 200)[:, None]
y = torch.sin(2 * x)
for step in range(args.steps):
    loss = ((torch.tanh(x @ w1 + b1) @ w2 + b2 - y) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        for p in params:
            p -= args.learning_rate * p.grad
            p.grad = None
    if step % 100 == 0:
        print(f"step {step} loss {loss.item():.4f}")
print(f"final loss {loss.item():.4f}")
