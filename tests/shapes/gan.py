"""A small GAN learning a ring of 8 Gaussians in 2-D: a generator and a discriminator,
each with its own Adam, updated in turn. Healthy, the discriminator's loss rises from its
first low while the generator's falls: the game working. With ``--d-lr-x100`` the
discriminator's learning rate is 100 times too high: it wins outright, its loss near 0,
the generator's gradients vanish through the saturated sigmoid and its loss climbs.

    python gan.py [--steps N] [--d-lr-x100]
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=400)
ap.add_argument("--d-lr-x100", action="store_true")
args = ap.parse_args()
torch.manual_seed(0)

generator = nn.Sequential(
    nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2)
)
discriminator = nn.Sequential(
    nn.Linear(2, 64), nn.LeakyReLU(0.2), nn.Linear(64, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1)
)
d_lr = 2e-4 * (100 if args.d_lr_x100 else 1)
opt_g = torch.optim.Adam(generator.parameters(), lr=2e-4, betas=(0.5, 0.999))
opt_d = torch.optim.Adam(discriminator.parameters(), lr=d_lr, betas=(0.5, 0.999))


def real_batch(n: int) -> torch.Tensor:
    k = torch.randint(0, 8, (n,)).float() * (2 * math.pi / 8)
    centres = torch.stack([k.cos(), k.sin()], 1) * 2.0
    return centres + 0.05 * torch.randn(n, 2)


ones, zeros = torch.ones(128, 1), torch.zeros(128, 1)
for step in range(args.steps):
    real = real_batch(128)
    fake = generator(torch.randn(128, 8))
    d_loss = F.binary_cross_entropy_with_logits(discriminator(real), ones) + (
        F.binary_cross_entropy_with_logits(discriminator(fake.detach()), zeros)
    )
    opt_d.zero_grad()
    d_loss.backward()
    opt_d.step()
    g_loss = F.binary_cross_entropy_with_logits(discriminator(fake), ones)
    opt_g.zero_grad()
    g_loss.backward()
    opt_g.step()
    if step % 50 == 0:
        print(f"step {step} d {d_loss.item():.3f} g {g_loss.item():.3f}")
