"""A decoder's output gamma-corrected with ** 0.45; the linear output goes negative."""

import torch
import torch.nn as nn

torch.manual_seed(24)
dec = nn.Linear(6, 12)
opt = torch.optim.SGD(dec.parameters(), lr=0.01)
target = torch.rand(32, 12)
for step in range(30):
    z = torch.randn(32, 6)
    img = dec(z) ** 0.45
    loss = ((img - target) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final {loss.item():.3f}")
