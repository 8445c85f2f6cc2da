"""A bounded regression that inverts its own tanh to score the pre-activation."""

import torch

torch.manual_seed(12)
W = (torch.randn(10, 1) * 0.1).requires_grad_()


def bounded(x, w):
    y = torch.tanh(x @ w)
    pre = torch.atanh(y)
    return y, pre


x = torch.randn(200, 10) * 3
target = (x[:, :1] * 4).tanh()
opt = torch.optim.SGD([W], lr=0.5)
for step in range(50):
    y, pre = bounded(x, W)
    loss = (y - target).pow(2).mean() + 1e-3 * pre.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final {loss.item():.4f}")
