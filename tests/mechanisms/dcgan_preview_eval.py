"""A small DCGAN on 8x8 images of bright squares whose loop previews the generator's samples
after its first update (``netG.eval()`` under ``no_grad``) and never puts it back in
training: from then on every BatchNorm of the generator normalises by running statistics
that counted one batch, still mostly a mean of 0 and a variance of 1. ``--restore`` calls
``netG.train()`` after the preview.

    python dcgan_preview_eval.py [--iters N] [--restore]
"""

import argparse

import torch
import torch.nn as nn

ap = argparse.ArgumentParser()
ap.add_argument("--iters", type=int, default=300)
ap.add_argument("--restore", action="store_true")
args = ap.parse_args()
torch.manual_seed(0)
nz, batch = 16, 64


def squares(n: int) -> torch.Tensor:
    """Images in [-1, 1]: a dark field with one bright 3x3 square at a random place."""
    img = -torch.ones(n, 1, 8, 8)
    r, c = torch.randint(0, 6, (n,)), torch.randint(0, 6, (n,))
    for i in range(n):
        img[i, 0, r[i] : r[i] + 3, c[i] : c[i] + 3] = 1.0
    return img + 0.05 * torch.randn_like(img)


netG = nn.Sequential(
    nn.ConvTranspose2d(nz, 64, 4, 1, 0, bias=False),  # 4x4
    nn.BatchNorm2d(64),
    nn.ReLU(True),
    nn.ConvTranspose2d(64, 32, 4, 2, 1, bias=False),  # 8x8
    nn.BatchNorm2d(32),
    nn.ReLU(True),
    nn.Conv2d(32, 1, 3, 1, 1, bias=False),
    nn.Tanh(),
)
netD = nn.Sequential(
    nn.Conv2d(1, 32, 4, 2, 1, bias=False),  # 4x4
    nn.LeakyReLU(0.2, True),
    nn.Conv2d(32, 64, 4, 2, 1, bias=False),  # 2x2
    nn.BatchNorm2d(64),
    nn.LeakyReLU(0.2, True),
    nn.Conv2d(64, 1, 2, 1, 0, bias=False),
    nn.Flatten(),
)
criterion = nn.BCEWithLogitsLoss()
optD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
optG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
fixed_noise = torch.randn(16, nz, 1, 1)
ones, zeros = torch.ones(batch, 1), torch.zeros(batch, 1)

for it in range(args.iters):
    real = squares(batch)
    fake = netG(torch.randn(batch, nz, 1, 1))
    optD.zero_grad()
    errD = criterion(netD(real), ones) + criterion(netD(fake.detach()), zeros)
    errD.backward()
    optD.step()
    optG.zero_grad()
    errG = criterion(netD(fake), ones)
    errG.backward()
    optG.step()
    if it % 100 == 0:
        netG.eval()  # preview the fixed noise's samples
        with torch.no_grad():
            preview = netG(fixed_noise)
        if args.restore:
            netG.train()
        print(f"[{it}] D {errD.item():.3f} G {errG.item():.3f} preview mean {preview.mean():.3f}")
