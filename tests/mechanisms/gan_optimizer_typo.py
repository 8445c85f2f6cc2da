"""A GAN on a 2-D spiral whose generator's optimizer is built on the discriminator's
parameters (a copy-paste of the line above it): the generator's parameters get a gradient
from every generator step, and no optimizer ever applies it; the "generator step" moves the
discriminator instead, against its own objective. The fakes never move. ``--fixed`` builds
it on the generator.

    python gan_optimizer_typo.py [--steps N] [--fixed]
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=300)
ap.add_argument("--fixed", action="store_true")
args = ap.parse_args()
torch.manual_seed(0)

netG = nn.Sequential(nn.Linear(2, 48), nn.SiLU(), nn.Linear(48, 48), nn.SiLU(), nn.Linear(48, 2))
netD = nn.Sequential(nn.Linear(2, 48), nn.SiLU(), nn.Linear(48, 48), nn.SiLU(), nn.Linear(48, 1))
optimizerD = torch.optim.RMSprop(netD.parameters(), lr=5e-4)
optimizerG = torch.optim.RMSprop((netG if args.fixed else netD).parameters(), lr=5e-4)


def spiral(n: int) -> torch.Tensor:
    t = torch.rand(n) * 3 * math.pi
    return torch.stack([t.cos() * t, t.sin() * t], 1) / 5 + 0.05 * torch.randn(n, 2)


for i in range(args.steps):
    real, noise = spiral(128), torch.randn(128, 2)
    fake = netG(noise)
    errD = F.softplus(-netD(real)).mean() + F.softplus(netD(fake.detach())).mean()
    netD.zero_grad()
    errD.backward()
    optimizerD.step()
    errG = F.softplus(-netD(fake)).mean()
    netG.zero_grad()
    errG.backward()
    optimizerG.step()
    if i % 50 == 0:
        print(
            f"[{i}] Loss_D {errD.item():.4f} Loss_G {errG.item():.4f} fake {fake.mean(0).tolist()}"
        )
