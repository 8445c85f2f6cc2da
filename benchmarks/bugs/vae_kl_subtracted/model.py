import torch
import torch.nn as nn


class Encoder(nn.Module):
    def __init__(self, latent: int = 4) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 64), nn.ReLU())
        self.mu = nn.Linear(64, latent)
        self.logvar = nn.Linear(64, latent)

    def forward(self, x):
        h = self.body(x)
        return self.mu(h), self.logvar(h)


class AutoEncoder(nn.Module):
    def __init__(self, latent: int = 4) -> None:
        super().__init__()
        self.encoder = Encoder(latent)
        self.decoder = nn.Sequential(nn.Linear(latent, 64), nn.ReLU(), nn.Linear(64, 16))

    def forward(self, x):
        mu, logvar = self.encoder(x)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.decoder(z), mu, logvar
