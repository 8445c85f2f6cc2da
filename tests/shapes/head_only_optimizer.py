"""A two-part classifier, an encoder and a head, whose optimizer was given only the head's
parameters (``Adam(model.head.parameters())``, copied from a fine-tuning recipe): the
encoder receives gradients every step and never moves, and the head learns what it can on
random features. ``--all`` gives the optimizer the whole model: the healthy run.

    python head_only_optimizer.py [--steps N] [--all]
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=200)
ap.add_argument("--all", action="store_true")
args = ap.parse_args()
torch.manual_seed(0)


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU())
        self.head = nn.Linear(128, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


teacher = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 8))
model = Classifier()
opt = torch.optim.Adam(model.parameters() if args.all else model.head.parameters(), lr=1e-3)
for step in range(args.steps):
    x = torch.randn(128, 32)
    with torch.no_grad():
        y = teacher(x).argmax(-1)
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 50 == 0:
        print(f"step {step} loss {loss.item():.4f}")
print(f"final loss {loss.item():.4f}")
