"""A small MLP VAE on 16-dimensional data from a few clusters, its loss written by hand:
reconstruction plus the KL divergence of the posterior from N(0, 1). With ``--flip`` the KL
term is subtracted instead of added (a sign error): the loss can fall without bound by
pushing the posterior's variance and mean away, and does (to about -1e5 within 300 steps);
the reconstruction gets worse all the while.

    python vae_kl_sign.py [--steps N] [--flip]
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=300)
ap.add_argument("--flip", action="store_true")
args = ap.parse_args()
torch.manual_seed(0)

centres = torch.randn(6, 16) * 2


class VAE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 8))
        self.dec = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 16))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mu, logvar = self.enc(x).chunk(2, dim=-1)
        z = mu + torch.randn_like(mu) * (0.5 * logvar).exp()
        return self.dec(z), mu, logvar


model = VAE()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(args.steps):
    x = centres[torch.randint(0, 6, (64,))] + 0.3 * torch.randn(64, 16)
    recon, mu, logvar = model(x)
    rec = F.mse_loss(recon, x, reduction="sum") / x.shape[0]
    kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(-1).mean()
    loss = rec - kl if args.flip else rec + kl
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 50 == 0:
        print(f"step {step} loss {loss.item():.1f} reconstruction {rec.item():.2f}")
print(f"final loss {loss.item():.1f} reconstruction {rec.item():.2f}")
