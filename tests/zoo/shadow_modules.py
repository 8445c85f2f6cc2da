"""A RealNVP flow's coupling layers kept in a plain list named `modules` (shadows
nn.Module.modules(), which PyTorch never calls here)."""
import torch
import torch.nn as nn

from _zoo import seed, watching


class Flow(nn.Module):
    def __init__(self):
        super().__init__()
        self.modules = []
        self.layers = nn.ModuleList([nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 4)])
        self.modules.extend(self.layers)

    def forward(self, x):
        for m in self.modules:
            x = m(x)
        return x


seed(1)
flow = Flow()
opt = torch.optim.Adam(nn.Module.parameters(flow), lr=1e-2)
with watching(flow, opt):
    for step in range(40):
        x = torch.randn(32, 4)
        loss = ((flow(x) - x.flip(1)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0:
            print(step, f"{loss.item():.4f}")
print("modules still a list:", type(flow.modules).__name__, len(flow.modules))
