"""A digits-style MLP with binary cross-entropy written in a loss class on probabilities."""

import torch
import torch.nn as nn

torch.manual_seed(6)


class HandBCE(nn.Module):
    def forward(self, z, t):
        p = torch.sigmoid(z)
        return -(t * torch.log(p) + (1 - t) * torch.log(1 - p)).mean()


net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
x = torch.randn(128, 16) * 6
t = (x.sum(1, keepdim=True) > 0).float()
crit = HandBCE()
opt = torch.optim.SGD(net.parameters(), lr=0.5)
for step in range(40):
    loss = crit(net(x), t)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final {loss.item():.3f}")
