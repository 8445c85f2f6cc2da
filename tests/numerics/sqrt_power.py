"""A repulsion term between particles as a distance ** 0.5; two particles coincide."""

import torch
import torch.nn as nn

torch.manual_seed(19)


class Spread(nn.Module):
    def __init__(self):
        super().__init__()
        self.pts = nn.Parameter(torch.randn(6, 2))

    def forward(self):
        diff = self.pts[:, None] - self.pts[None]
        dist = (diff * diff).sum(-1) ** 0.5
        return -dist.mean() + (self.pts**2).sum()


model = Spread()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(30):
    loss = model()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final {loss.item():.3f}")
