"""A program with no optimizer that calls ``torch.autograd.grad`` twice an iteration: once
for the data term's gradient and once for a smoothness penalty's, and updates the weights by
hand with their sum. At iteration 150 the penalty divides by a norm that is 0 (a zero
weight row), its gradient is NaN, and so are the weights from then on.

    python grad_twice.py [--steps N]
"""

import argparse

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=200)
args = ap.parse_args()
torch.manual_seed(0)

w = torch.randn(8, 4, requires_grad=True)
true_w = torch.randn(8, 4)
for it in range(args.steps):
    x = torch.randn(32, 8)
    loss = ((x @ w - x @ true_w) ** 2).mean()
    (g_data,) = torch.autograd.grad(loss, [w])
    rows = w if it != 150 else w * torch.tensor([0.0] + [1.0] * 7).unsqueeze(1)
    penalty = 1e-3 * (rows / rows.norm(dim=1, keepdim=True)).sum()
    (g_pen,) = torch.autograd.grad(penalty, [w])
    with torch.no_grad():
        w -= 0.05 * (g_data + g_pen)
    if it % 50 == 0:
        print(f"iteration {it} loss {loss.item():.4f}")
print(f"final loss {loss.item()}")
