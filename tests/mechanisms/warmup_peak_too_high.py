"""A small MLP classifier trained with AdamW under a linear warm-up of 1,000 steps to a peak
learning rate of 0.3 (3e-3 was meant). The first updates are tiny (the rate starts at 3e-4),
as a warm-up makes them; as the rate climbs past ~0.05 the loss blows up. ``--peak 3e-3``
trains.

    python warmup_peak_too_high.py [--steps N] [--peak LR]
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=500)
ap.add_argument("--peak", type=float, default=0.3)
args = ap.parse_args()
torch.manual_seed(0)

centres = torch.randn(8, 24)
net = nn.Sequential(
    nn.Linear(24, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 8)
)
opt = torch.optim.AdamW(net.parameters(), lr=args.peak, weight_decay=0.01)
warmup = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 1000))
for step in range(args.steps):
    y = torch.randint(0, 8, (64,))
    x = centres[y] + 0.8 * torch.randn(64, 24)
    loss = F.cross_entropy(net(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    warmup.step()
    if step % 50 == 0:
        print(f"step {step} lr {warmup.get_last_lr()[0]:.4g} loss {loss.item():.4f}")
