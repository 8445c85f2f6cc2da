"""A two-layer MLP classifier of 5 noisy prototypes trained with SGD whose weight decay is
2.0 (2e-4 was meant): the decay pulls every weight to zero faster than the gradient can
move it, the outputs collapse to the same logits, and the loss stays at chance (ln 5).
``--decay 1e-4`` trains.

    python decay_pinned.py [--steps N] [--decay D]
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=300)
ap.add_argument("--decay", type=float, default=2.0)
args = ap.parse_args()
torch.manual_seed(0)

prototypes = torch.randn(5, 32)
mlp = nn.Sequential(nn.Linear(32, 128), nn.Tanh(), nn.Linear(128, 5))
sgd = torch.optim.SGD(mlp.parameters(), lr=0.1, momentum=0.9, weight_decay=args.decay)
for step in range(args.steps):
    target = torch.randint(0, 5, (128,))
    inputs = prototypes[target] + 0.7 * torch.randn(128, 32)
    loss = F.cross_entropy(mlp(inputs), target)
    sgd.zero_grad()
    loss.backward()
    sgd.step()
    if step % 50 == 0:
        print(f"step {step} loss {loss.item():.4f}")
