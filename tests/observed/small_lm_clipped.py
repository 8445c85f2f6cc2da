"""A small word-level language model (embedding, GRU, tied output) trained with Adam and
``clip_grad_norm_(..., 1.0)``, as most LM recipes clip. ``--lr`` 0.3 is 100x the recipe's
3e-3: the gradient norms reach the hundreds, and the clip hides them (it returns 1.0 or
less after clipping; the norms a logger sees after the clip are all <= 1).

    python small_lm_clipped.py [--lr 0.003] [--steps N]
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--lr", type=float, default=3e-3)
ap.add_argument("--steps", type=int, default=120)
args = ap.parse_args()
torch.manual_seed(2)

V, D, T, B = 60, 64, 20, 16
# a corpus with structure: each word is followed by one of two successors
succ = torch.randint(0, V, (V, 2))
seq = [0]
g = torch.Generator().manual_seed(1)
for _ in range(20000):
    seq.append(int(succ[seq[-1], int(torch.randint(0, 2, (1,), generator=g))]))
data = torch.tensor(seq)


class LM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.rnn = nn.GRU(D, D, batch_first=True)
        self.head = nn.Linear(D, V)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h, _ = self.rnn(self.embed(idx))
        return self.head(h)


model = LM()
opt = torch.optim.Adam(model.parameters(), lr=args.lr)
for step in range(args.steps):
    ix = torch.randint(0, len(data) - T - 1, (B,))
    x = torch.stack([data[i : i + T] for i in ix])
    y = torch.stack([data[i + 1 : i + 1 + T] for i in ix])
    loss = F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if step % 20 == 0:
        print(f"step {step}: loss {loss.item():.3f}")
