"""A GAN on a two-mode 1-D mixture whose discriminator is trained by SGD at lr 5, a thousand
times its generator's Adam rate (5e-3 meant): within a few steps its ReLUs die, its output is
one constant for every input, both losses freeze, and the generator gets no gradient through
it: the game stopped, and the fakes never move again. ``--d-lr 5e-3`` plays the game.

    python gan_stopped_game.py [--steps N] [--d-lr LR]
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=400)
ap.add_argument("--d-lr", type=float, default=5.0)
args = ap.parse_args()
torch.manual_seed(0)

gen = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 1))
disc = nn.Sequential(nn.Linear(1, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))
opt_gen = torch.optim.Adam(gen.parameters(), lr=1e-3)
opt_disc = torch.optim.SGD(disc.parameters(), lr=args.d_lr)
real_label, fake_label = torch.ones(256, 1), torch.zeros(256, 1)
for step in range(args.steps):
    real = torch.where(torch.rand(256, 1) < 0.5, -2.0, 2.0) + 0.3 * torch.randn(256, 1)
    fake = gen(torch.randn(256, 4))
    d_loss = F.binary_cross_entropy_with_logits(disc(real), real_label)
    d_loss = d_loss + F.binary_cross_entropy_with_logits(disc(fake.detach()), fake_label)
    opt_disc.zero_grad()
    d_loss.backward()
    opt_disc.step()
    g_loss = F.binary_cross_entropy_with_logits(disc(fake), real_label)
    opt_gen.zero_grad()
    g_loss.backward()
    opt_gen.step()
    if step % 50 == 0:
        print(f"step {step} d {d_loss.item():.4f} g {g_loss.item():.4f} fake std {fake.std():.3f}")
