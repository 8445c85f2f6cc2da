"""A model cast with model.half() and trained with Adam's defaults: its eps (1e-8) is 0 in
float16, small squared gradients underflow to 0, and the first update divides by 0."""

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)).half()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(40):
    x = torch.randn(64, 32).half()
    y = x[:, :4].float().argmax(1)
    loss = nn.functional.cross_entropy(model(x).float(), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 10 == 0:
        print(step, loss.item())
