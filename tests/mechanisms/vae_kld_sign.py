"""A VAE on 8x8 binary glyphs as pytorch/examples writes it (a sigmoid decoder, a summed
binary cross-entropy, the KL term in closed form), whose KL line lost its leading minus:
``KLD = 0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())``. The loss then rewards a
posterior as far from N(0, 1) as it can get: log-variances and means run off, the loss falls
through 0 without bound, and the gradients grow with it. ``--fixed`` restores the minus.

    python vae_kld_sign.py [--steps N] [--fixed]
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=300)
ap.add_argument("--fixed", action="store_true")
args = ap.parse_args()
torch.manual_seed(0)

glyphs = (torch.rand(10, 64) < 0.3).float()


class VAE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.fc21, self.fc22 = nn.Linear(128, 6), nn.Linear(128, 6)
        self.fc3, self.fc4 = nn.Linear(6, 128), nn.Linear(128, 64)

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
        std = torch.exp(0.5 * logvar)
        return mu + torch.randn_like(std) * std

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.fc4(F.relu(self.fc3(z))))

    def forward(self, x: torch.Tensor):
        mu, logvar = self.encode(x)
        return self.decode(self.reparameterize(mu, logvar)), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x, reduction="sum")
    sign = -0.5 if args.fixed else 0.5
    KLD = sign * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return BCE + KLD


model = VAE()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(args.steps):
    data = glyphs[torch.randint(0, 10, (32,))]
    flips = (torch.rand(32, 64) < 0.05).float()
    data = (data + flips) % 2
    optimizer.zero_grad()
    recon_batch, mu, logvar = model(data)
    loss = loss_function(recon_batch, data, mu, logvar)
    loss.backward()
    optimizer.step()
    if step % 50 == 0:
        print(f"step {step} loss {loss.item() / len(data):.4f}")
