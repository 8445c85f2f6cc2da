"""A GAN on a 1-D mixture of two Gaussians. With ``--d-lr 0.5`` (100x the generator's 5e-3)
SGD throws the discriminator's last layer to where its logit is 0 for every input: its
output is 0.5 for real and fake alike, both losses sit at ln 2, it passes the generator no
gradient, and the fakes stop moving. The default rates play the game.

    python gan_frozen_game.py [--steps N] [--d-lr LR]
"""

import argparse

import torch
import torch.nn as nn

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=400)
ap.add_argument("--d-lr", type=float, default=5e-3)
args = ap.parse_args()
torch.manual_seed(0)

G = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 1))
D = nn.Sequential(nn.Linear(1, 32), nn.ReLU(), nn.Linear(32, 1), nn.Sigmoid())
g_opt = torch.optim.SGD(G.parameters(), lr=5e-3, momentum=0.5)
d_opt = torch.optim.SGD(D.parameters(), lr=args.d_lr, momentum=0.5)
bce = nn.BCELoss()
for step in range(args.steps):
    real = torch.where(torch.rand(256, 1) < 0.5, -2.0, 2.0) + 0.3 * torch.randn(256, 1)
    fake = G(torch.randn(256, 4))
    d_real, d_fake = D(real), D(fake.detach())
    loss_d = bce(d_real, torch.ones_like(d_real)) + bce(d_fake, torch.zeros_like(d_fake))
    d_opt.zero_grad()
    loss_d.backward()
    d_opt.step()
    loss_g = bce(D(fake), torch.ones(256, 1))
    g_opt.zero_grad()
    loss_g.backward()
    g_opt.step()
    if step % 50 == 0:
        print(
            f"step {step} D {loss_d.item():.4f} G {loss_g.item():.4f} "
            f"fake mean {fake.mean().item():.3f} std {fake.std().item():.3f}"
        )
