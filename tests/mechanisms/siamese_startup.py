"""A Siamese embedding network trained with a contrastive loss on pairs of noisy 2-D
points: same cluster or not. Adam's first steps at lr 0.1 overshoot once (the loss jumps
for a step or two at start-up), then it settles and learns. Healthy.

    python siamese_startup.py [--steps N]
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=300)
args = ap.parse_args()
torch.manual_seed(0)

centres = torch.randn(6, 8) * 3


class Tower(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 16))

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.body(a), self.body(b)


def contrastive(za: torch.Tensor, zb: torch.Tensor, same: torch.Tensor, margin: float = 2.5):
    d = F.pairwise_distance(za, zb)
    return (same * d.pow(2) + (1 - same) * F.relu(margin - d).pow(2)).mean()


net = Tower()
opt = torch.optim.Adam(net.parameters(), lr=0.1)
for step in range(args.steps):
    i, j = torch.randint(0, 6, (64,)), torch.randint(0, 6, (64,))
    a = centres[i] + 0.5 * torch.randn(64, 8)
    b = centres[j] + 0.5 * torch.randn(64, 8)
    loss = contrastive(*net(a, b), (i == j).float())
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step < 8 or step % 50 == 0:
        print(f"step {step} loss {loss.item():.3f}")
