"""Batch standard deviations from torch.mean(x * x) - torch.mean(x) ** 2 in a helper."""

import torch

torch.manual_seed(21)
w = torch.nn.Parameter(torch.randn(3, 8) * 0.001)
b = torch.nn.Parameter(torch.full((8,), 5000.0))


def batch_std(x):
    return torch.sqrt(torch.mean(x * x, 0) - torch.mean(x, 0) ** 2)


opt = torch.optim.SGD([w], lr=0.001)
for step in range(30):
    h = torch.randn(32, 3) @ w + b
    loss = ((batch_std(h) - 1.0) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final {loss.item():.3f}")
