"""A 40-layer linear network (no activations, as in studies of deep linear nets) with
PyTorch's default init: each layer passes back a third of the gradient's variance."""

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(40)], nn.Linear(64, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(60):
    x = torch.randn(32, 64)
    loss = (model(x) - x[:, :1]).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 20 == 0:
        print(step, round(loss.item(), 4))
