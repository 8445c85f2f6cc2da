"""A 5-class classifier whose model ends in ``nn.Softmax``, trained with
``F.cross_entropy`` (which applies its own log-softmax): the loss is the cross-entropy of the
softmax of probabilities, and stalls at 0.905 however right the model is. ``--logits``
drops the softmax: the healthy run.

    python softmax_into_ce.py [--steps N] [--logits]
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=300)
ap.add_argument("--logits", action="store_true")
args = ap.parse_args()
torch.manual_seed(0)

centres = torch.randn(5, 20) * 1.5
layers: list[nn.Module] = [nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5)]
if not args.logits:
    layers.append(nn.Softmax(dim=-1))
model = nn.Sequential(*layers)
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for step in range(args.steps):
    y = torch.randint(0, 5, (64,))
    x = centres[y] + torch.randn(64, 20)
    out = model(x)
    loss = F.cross_entropy(out, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 60 == 0:
        accuracy = (out.argmax(-1) == y).float().mean()
        print(f"step {step} loss {loss.item():.4f} accuracy {accuracy:.2f}")
print(f"final loss {loss.item():.4f}")
