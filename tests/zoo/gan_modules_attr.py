"""A GAN with two optimizers whose generator keeps its layers in a plain list named
`modules` and whose discriminator names its own config `children`."""
import torch
import torch.nn as nn

from _zoo import seed, watching


class G(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.ModuleList([nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 1)])
        self.modules = list(self.net)

    def forward(self, z):
        for m in self.modules:
            z = m(z)
        return z


class D(nn.Module):
    def __init__(self):
        super().__init__()
        self.children = {"hidden": 16}
        self.net = nn.Sequential(nn.Linear(1, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))

    def forward(self, x):
        return self.net(x)


seed(32)
g, d = G(), D()
opt_g = torch.optim.Adam(nn.Module.parameters(g), lr=1e-3)
opt_d = torch.optim.Adam(d.net.parameters(), lr=1e-3)
bce = nn.BCEWithLogitsLoss()
with watching(g, opt_g):
    for step in range(40):
        real = torch.randn(32, 1) * 0.5 + 3
        fake = g(torch.randn(32, 2))
        loss_d = bce(d(real), torch.ones(32, 1)) + bce(d(fake.detach()), torch.zeros(32, 1))
        opt_d.zero_grad()
        loss_d.backward()
        opt_d.step()
        loss_g = bce(d(fake), torch.ones(32, 1))
        opt_g.zero_grad()
        loss_g.backward()
        opt_g.step()
print("d", f"{loss_d.item():.4f}", "g", f"{loss_g.item():.4f}", "fake mean", f"{fake.mean():.3f}")
