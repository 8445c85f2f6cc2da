"""A character-level LSTM language model. Its config reads the clipping threshold with a
default of 0.0, meant as "no clipping", and the loop clips by it whatever its value: every
update is scaled to nothing."""

import argparse

import torch
import torch.nn.functional as F
from data import load
from model import CharLSTM

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=300)
ap.add_argument("--clip", type=float, default=0.0)
ap.add_argument("--seq", type=int, default=32)
args = ap.parse_args()

torch.manual_seed(0)
text, chars = load()
ids = torch.tensor([chars.index(c) for c in text])
lm = CharLSTM(len(chars))
opt = torch.optim.Adam(lm.parameters(), lr=3e-3)
for step in range(args.steps):
    at = torch.randint(0, len(ids) - args.seq - 1, (32,))
    x = torch.stack([ids[a : a + args.seq] for a in at])
    y = torch.stack([ids[a + 1 : a + args.seq + 1] for a in at])
    loss = F.cross_entropy(lm(x).reshape(-1, len(chars)), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(lm.parameters(), args.clip)
    opt.step()
print(f"loss {loss.item():.4f}")
