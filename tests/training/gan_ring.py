# A standard GAN (the non-saturating loss, BCE with logits) on a ring of radius 2, one
# discriminator step per generator step. --d-lr-scale multiplies the discriminator's
# learning rate.
import argparse

import torch
from torch import nn
from torch.nn import functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--d-lr-scale", type=float, default=1.0)
args = parser.parse_args()

torch.manual_seed(5)


def ring(n):
    angle = 2 * torch.pi * torch.rand(n)
    return 2 * torch.stack([angle.cos(), angle.sin()], 1) + 0.05 * torch.randn(n, 2)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 64), nn.LeakyReLU(0.2), nn.Linear(64, 2))

    def forward(self, z):
        return self.net(z)


gen = Generator()
disc = nn.Sequential(nn.Linear(2, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1))
g_opt = torch.optim.Adam(gen.parameters(), lr=1e-3, betas=(0.5, 0.999))
d_opt = torch.optim.Adam(disc.parameters(), lr=1e-3 * args.d_lr_scale, betas=(0.5, 0.999))
for step in range(1500):
    real, fake = ring(128), gen(torch.randn(128, 4))
    d_real, d_fake = disc(real), disc(fake.detach())
    d_loss = F.binary_cross_entropy_with_logits(
        d_real, torch.ones_like(d_real)
    ) + F.binary_cross_entropy_with_logits(d_fake, torch.zeros_like(d_fake))
    d_opt.zero_grad()
    d_loss.backward()
    d_opt.step()
    out = disc(fake)
    g_loss = F.binary_cross_entropy_with_logits(out, torch.ones_like(out))
    g_opt.zero_grad()
    g_loss.backward()
    g_opt.step()
    if step % 300 == 0:
        print(step, f"d {d_loss.item():.3f} g {g_loss.item():.3f}")
with torch.no_grad():
    radius = gen(torch.randn(2000, 4)).norm(dim=1)
print(f"fakes' radius {radius.mean():.2f} +- {radius.std():.2f} (the ring's: 2.00)")
