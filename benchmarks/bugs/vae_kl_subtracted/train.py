"""A variational autoencoder whose objective was written from the ELBO (reconstruction
log-likelihood minus the KL) and negated by hand, one sign at a time: the KL term ends up
subtracted from the loss instead of added."""

import argparse

import torch
from data import load
from model import AutoEncoder

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=300)
ap.add_argument("--beta", type=float, default=1.0)
args = ap.parse_args()

torch.manual_seed(0)
points = load()
vae = AutoEncoder()
opt = torch.optim.Adam(vae.parameters(), lr=1e-3)
for step in range(args.steps):
    x = points[torch.randint(0, len(points), (64,))]
    recon, mu, logvar = vae(x)
    rec = ((recon - x) ** 2).sum(1).mean()
    kl = (-0.5 * (1 + logvar - mu**2 - logvar.exp()).sum(1)).mean()
    objective = rec - args.beta * kl
    opt.zero_grad()
    objective.backward()
    opt.step()
    if step % 100 == 0:
        print(f"step {step} objective {objective.item():.4g}")
print(f"loss {objective.item():.4f}")
