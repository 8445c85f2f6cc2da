"""A small convolutional classifier whose training script clips gradients with a threshold
read from its config, where 0 was meant as "no clipping": ``clip_grad_norm_(params, 0.0)``
scales every gradient to zero, so no update ever moves a weight. ``--clip 1`` clips as meant.

    python clip_zero.py [--steps N] [--clip C]
"""

import argparse

import torch
import torch.nn as nn

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=200)
ap.add_argument("--clip", type=float, default=0.0)
args = ap.parse_args()
torch.manual_seed(0)

patterns = torch.randn(4, 1, 12, 12)
model = nn.Sequential(
    nn.Conv2d(1, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(512, 4)
)
optim = torch.optim.Adam(model.parameters(), lr=1e-3)
for it in range(args.steps):
    labels = torch.randint(0, 4, (32,))
    images = patterns[labels] + 0.8 * torch.randn(32, 1, 12, 12)
    loss = nn.functional.cross_entropy(model(images), labels)
    optim.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), max_norm=args.clip)
    optim.step()
    if it % 50 == 0:
        print(f"iter {it} loss {loss.item():.4f}")
