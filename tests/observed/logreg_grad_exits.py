"""Logistic regression written out by hand, in the style of the published NaN reports:
raw tensors, the objective's gradient from torch.autograd.grad, a fixed step. The
objective takes log(sigmoid(z)) directly; once the weights grow, sigmoid(z) rounds to 0
for a sample the model gets confidently wrong and its log is -inf. The loop prints the
objective and exits at the first NaN/Inf, with exit code 0.

    python logreg_grad_exits.py
"""

import sys

import torch

torch.manual_seed(5)
n, d = 200, 6
X = torch.randn(n, d)
w_true = torch.randn(d) * 4
y = (X @ w_true + 0.8 * torch.randn(n) > 0).float()  # overlapping classes: some samples wrong

w = torch.zeros(d, requires_grad=True)
b = torch.zeros((), requires_grad=True)
lr = 40.0
for it in range(500):
    z = X @ w + b
    objective = -(y * torch.log(torch.sigmoid(z)) + (1 - y) * torch.log(torch.sigmoid(-z))).mean()
    print(f"iteration {it}: objective {objective.item():.6f}")
    if torch.isnan(objective) or torch.isinf(objective):
        print("objective is not finite, exiting")
        sys.exit(0)
    gw, gb = torch.autograd.grad(objective, [w, b])
    with torch.no_grad():
        w -= lr * gw
        b -= lr * gb
