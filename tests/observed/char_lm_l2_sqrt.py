"""A character-level language model with a hand-written L2 penalty: the norm of every
parameter, sqrt((p ** 2).sum()). The biases start at zero, and the derivative of sqrt at 0
is infinite: 0 * inf = NaN in every bias gradient from the first step. Under python the
weights turn NaN, the losses print nan and the final check exits 1.

    python char_lm_l2_sqrt.py [--steps N]
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=30)
args = ap.parse_args()
torch.manual_seed(7)

text = "the quick brown fox jumps over the lazy dog; " * 60
chars = sorted(set(text))
data = torch.tensor([chars.index(c) for c in text])
V, T, D = len(chars), 16, 48


class CharLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.hidden = nn.Linear(D * T, 128)
        self.out = nn.Linear(128, V * T)
        for m in (self.hidden, self.out):
            nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.hidden(self.embed(idx).flatten(1)))
        return self.out(h).view(len(idx), T, V)


model = CharLM()
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
final = math.nan
for step in range(args.steps):
    ix = torch.randint(0, len(data) - T - 1, (32,))
    x = torch.stack([data[i : i + T] for i in ix])
    y = torch.stack([data[i + 1 : i + 1 + T] for i in ix])
    ce = F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))
    penalty = sum(torch.sqrt((p**2).sum()) for p in model.parameters())
    loss = ce + 1e-4 * penalty
    opt.zero_grad()
    loss.backward()
    opt.step()
    final = ce.item()
    print(f"step {step}: loss {final:.4f}")
if not math.isfinite(final):
    raise SystemExit(f"training failed: the loss is {final}")
print("done")
