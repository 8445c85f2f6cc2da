# WGAN-GP on eight Gaussians in a ring, written as the reference code is: five critic
# iterations a generator iteration, three backward() calls in each (the real batch with a
# gradient of -1, the fake one with +1, then the gradient penalty), the critic's parameters
# frozen while the generator trains. --no-penalty computes the penalty and leaves it out of
# backward() (the critic unconstrained).
import argparse
import math

import torch
from torch import autograd, nn

parser = argparse.ArgumentParser()
parser.add_argument("--no-penalty", action="store_true")
args = parser.parse_args()

torch.manual_seed(4)
centres = torch.tensor(
    [[2 * math.cos(k * math.pi / 4), 2 * math.sin(k * math.pi / 4)] for k in range(8)]
)


def real_batch(n=128):
    return centres[torch.randint(0, 8, (n,))] + 0.05 * torch.randn(n, 2)


netG = nn.Sequential(
    nn.Linear(2, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 2)
)
netD = nn.Sequential(
    nn.Linear(2, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 1)
)
optD = torch.optim.Adam(netD.parameters(), lr=1e-4, betas=(0.5, 0.9))
optG = torch.optim.Adam(netG.parameters(), lr=1e-4, betas=(0.5, 0.9))
one, mone = torch.tensor(1.0), torch.tensor(-1.0)


def penalty(real, fake):
    alpha = torch.rand(real.size(0), 1)
    mixed = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    out = netD(mixed)
    grads = autograd.grad(out, mixed, grad_outputs=torch.ones_like(out), create_graph=True)[0]
    return ((grads.norm(2, dim=1) - 1) ** 2).mean() * 0.1


for iteration in range(250):
    for p in netD.parameters():
        p.requires_grad = True
    for _ in range(5):
        real = real_batch()
        netD.zero_grad()
        d_real = netD(real).mean()
        d_real.backward(mone)
        fake = netG(torch.randn(128, 2)).detach()
        d_fake = netD(fake).mean()
        d_fake.backward(one)
        gp = penalty(real, fake)
        if not args.no_penalty:
            gp.backward()
        optD.step()
    for p in netD.parameters():
        p.requires_grad = False
    netG.zero_grad()
    g_cost = netD(netG(torch.randn(128, 2))).mean()
    g_cost.backward(mone)
    optG.step()
    if iteration % 50 == 0:
        print(iteration, f"W {float(d_real - d_fake):.3f} gp {float(gp):.3f}")
with torch.no_grad():
    fake = netG(torch.randn(2000, 2))
    nearest = torch.cdist(fake, centres).min(1).values
print(f"fakes within 0.5 of a mode: {(nearest < 0.5).float().mean():.2f}")
