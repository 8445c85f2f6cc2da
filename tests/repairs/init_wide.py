"""Classifies points of ten interleaved spirals with an MLP whose init draws N(0, 1)."""

import torch
from torch import nn

torch.manual_seed(8)


def spirals(n, k=10):
    t = torch.rand(n) * 3
    c = torch.randint(0, k, (n,))
    angle = t * 2.5 + c * (2 * torch.pi / k)
    x = torch.stack([t * torch.cos(angle), t * torch.sin(angle)], 1)
    return x + 0.05 * torch.randn_like(x), c


class Net(nn.Module):
    def __init__(self, width=128, classes=10):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(2, width), nn.ReLU(),
            nn.Linear(width, width), nn.ReLU(),
            nn.Linear(width, width), nn.ReLU(),
            nn.Linear(width, classes),
        )  # fmt: skip
        self.apply(self.init)

    @staticmethod
    def init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 1.0)
            nn.init.zeros_(m.bias)

    def forward(self, x):
        return self.layers(x)


net = Net()
opt = torch.optim.Adam(net.parameters(), lr=3e-3)
for step in range(300):
    x, c = spirals(256)
    loss = nn.functional.cross_entropy(net(x), c)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 100 == 0:
        print(f"step {step} loss {loss.item():.3f}")
print(f"final loss {loss.item():.3f}")
