"""A calibration head that regresses the odds p / (1 - p) of a sigmoid against targets."""

import torch
import torch.nn as nn

torch.manual_seed(13)

net = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 1))
odds = lambda z: torch.sigmoid(z) / (1 - torch.sigmoid(z))  # noqa: E731
x = torch.randn(300, 6) * 20
target = x[:, :1].abs()
opt = torch.optim.Adam(net.parameters(), lr=1e-2)
for step in range(60):
    loss = (odds(net(x)).log1p() - target.log1p()).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final {loss.item():.4f}")
