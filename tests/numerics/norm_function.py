"""Unit vectors from torch.linalg.norm in a helper; a blank sample has the zero vector."""

import torch

torch.manual_seed(11)
proj = torch.nn.Linear(5, 3, bias=False)


def unit(v):
    return v / torch.linalg.norm(v, dim=-1, keepdim=True)


x = torch.randn(20, 5)
x[3] = 0.0
target = unit(torch.randn(20, 3))
opt = torch.optim.SGD(proj.parameters(), lr=0.1)
for step in range(30):
    loss = (1 - (unit(proj(x)) * target).sum(-1)).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final {loss.item():.3f}")
