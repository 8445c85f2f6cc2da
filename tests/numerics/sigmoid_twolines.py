"""A logistic model whose cost is written over two lines, the sigmoid taken by method."""

import torch

torch.manual_seed(7)
X = torch.randn(100, 3) * 4
Y = (X @ torch.tensor([1.0, -2.0, 0.5]) > 0).float()
theta = torch.zeros(3, requires_grad=True)
opt = torch.optim.SGD([theta], lr=4.0)
for it in range(40):
    prob = (X @ theta).sigmoid()
    J = -(Y * torch.log(prob)
          + (1 - Y) * torch.log(1 - prob)).mean()
    opt.zero_grad()
    J.backward()
    opt.step()
print(f"final {J.item():.3f}")
