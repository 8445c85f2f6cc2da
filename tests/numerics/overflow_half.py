"""A Poisson rate computed in float16: exp of the half-precision score overflows 65,504."""

import torch

torch.manual_seed(8)
w = torch.nn.Parameter(torch.full((4,), 0.5))
x = torch.randn(64, 4) * 2 + 3
counts = torch.poisson(torch.full((64,), 3.0))
opt = torch.optim.Adam([w], lr=1e-2)
for step in range(30):
    rate = torch.exp((x @ w).half() * 0.5 + 7.0)
    loss = (rate.float() - counts * torch.log(rate.float())).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final {loss.item():.3f}")
