"""A siamese encoder trained on the cosine similarity of pairs, the similarity written out by
hand in the training loop, with a CSV of the loss written to ``--logdir`` every step (as a
logger would). At step 60 a pair holds an all-zero input: the encoder (no bias) maps it to
the zero vector, the cosine divides 0 by a norm of 0, and the loss is NaN; the program
stops there (exit 1). It wrote files, so gradoc may not re-run it.

    python cosine_writes_logs.py [--steps N] [--logdir DIR] [--healthy]
"""

import argparse
import csv
import sys
from pathlib import Path

import torch
import torch.nn as nn

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=100)
ap.add_argument("--logdir", default="logs")
ap.add_argument("--healthy", action="store_true")
args = ap.parse_args()
torch.manual_seed(0)

encoder = nn.Sequential(nn.Linear(16, 32, bias=False), nn.Tanh(), nn.Linear(32, 8, bias=False))
opt = torch.optim.Adam(encoder.parameters(), lr=1e-3)
logdir = Path(args.logdir)
logdir.mkdir(parents=True, exist_ok=True)
with open(logdir / "metrics.csv", "w", newline="") as fh:
    log = csv.writer(fh)
    log.writerow(["step", "loss"])
    for step in range(args.steps):
        a = torch.randn(32, 16)
        b = a + 0.1 * torch.randn(32, 16)
        if step == 60 and not args.healthy:
            a[3] = 0.0
            b[3] = 0.0
        za, zb = encoder(a), encoder(b)
        cos = (za * zb).sum(-1) / (za.norm(dim=-1) * zb.norm(dim=-1))
        loss = (1 - cos).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        log.writerow([step, loss.item()])
        if not torch.isfinite(loss):
            print(f"step {step}: loss is {loss.item()}", file=sys.stderr)
            sys.exit(1)
print(f"final loss {loss.item():.4f}")
