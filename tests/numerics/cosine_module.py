"""A geodesic distance on the sphere in a module: arccos of a dot of unit vectors."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(23)


class Geodesic(nn.Module):
    def forward(self, a, b):
        dot = (F.normalize(a, dim=-1) * F.normalize(b, dim=-1)).sum(-1)
        return torch.arccos(dot)


enc = nn.Linear(3, 3)
geo = Geodesic()
opt = torch.optim.SGD(enc.parameters(), lr=0.05)
for step in range(30):
    x = torch.randn(64, 3)
    loss = geo(enc(x), enc(x)).mean() + geo(enc(x), enc(-x)).mean() * 0.1
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final {loss.item():.3f}")
