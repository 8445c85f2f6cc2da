"""A small CNN with BatchNorm and dropout, classifying which quadrant of an 8x8 image holds a
bright blob. The program evaluates the untrained model once before training, with
``model.eval()``, and never calls ``model.train()``: every step trains in evaluation mode,
BatchNorm normalising by running statistics it never learns (a mean of 0, a variance of 1).
``--train-mode`` puts ``model.train()`` back: the healthy run.

    python eval_left_on.py [--steps N] [--train-mode]
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=150)
ap.add_argument("--train-mode", action="store_true")
args = ap.parse_args()
torch.manual_seed(0)


def batch(n: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    y = torch.randint(0, 4, (n,))
    x = torch.randn(n, 1, 8, 8) * 0.5
    for i, q in enumerate(y.tolist()):
        r, c = divmod(q, 2)
        x[i, 0, r * 4 : r * 4 + 4, c * 4 : c * 4 + 4] += 3.0
    return x * 20 + 40, y  # raw pixel scale: what BatchNorm is there to normalise


model = nn.Sequential(
    nn.Conv2d(1, 16, 3, padding=1),
    nn.BatchNorm2d(16),
    nn.ReLU(),
    nn.Conv2d(16, 16, 3, padding=1),
    nn.BatchNorm2d(16),
    nn.ReLU(),
    nn.Flatten(),
    nn.Dropout(0.2),
    nn.Linear(16 * 64, 4),
)
opt = torch.optim.SGD(model.parameters(), lr=0.01)

model.eval()
with torch.no_grad():
    x, y = batch()
    print(f"before training: accuracy {(model(x).argmax(-1) == y).float().mean():.2f}")
if args.train_mode:
    model.train()

for step in range(args.steps):
    x, y = batch()
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 30 == 0:
        print(f"step {step} loss {loss.item():.4f}")
model.eval()
with torch.no_grad():
    x, y = batch(512)
    print(f"accuracy {(model(x).argmax(-1) == y).float().mean():.2f}")
