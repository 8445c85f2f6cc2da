"""A small VAE of points on two rings; the KL term lost its minus sign when it was scaled."""

import torch
from torch import nn

torch.manual_seed(6)


def rings(n):
    r = torch.where(torch.rand(n) < 0.5, 1.0, 2.5)
    a = torch.rand(n) * 2 * torch.pi
    return torch.stack([r * a.cos(), r * a.sin()], 1) + 0.05 * torch.randn(n, 2)


class RingVAE(nn.Module):
    def __init__(self, hidden=64, latent=2):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(2, hidden), nn.ReLU(), nn.Linear(hidden, 2 * latent))
        self.dec = nn.Sequential(nn.Linear(latent, hidden), nn.ReLU(), nn.Linear(hidden, 2))

    def forward(self, x):
        mu, lv = self.enc(x).chunk(2, dim=-1)
        z = mu + torch.randn_like(mu) * (0.5 * lv).exp()
        return self.dec(z), mu, lv


vae = RingVAE()
opt = torch.optim.Adam(vae.parameters(), lr=2e-3)
for step in range(400):
    x = rings(128)
    out, mu, lv = vae(x)
    recon = ((out - x) ** 2).sum(1).mean()
    kl = (1 + lv - mu**2 - lv.exp()).sum(1).mean() * 0.5
    loss = recon + kl
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 100 == 0:
        print(f"step {step} loss {loss.item():.3f}")
print(f"final loss {loss.item():.3f}")
