"""A next-token model over a 5,000-word vocabulary (an embedding, a LayerNorm'd MLP, an
output projection) whose projection is initialised with std 0.15 from a config meant for a
narrower model (0.02 was meant): the first logits are spread by ~2.4, so the first loss is
ln 5000 + 3 nats, 1.35x chance: the model starts confident and wrong, and spends its first
hundred steps unlearning it. ``--init-std 0.02`` starts at chance.

    python wide_vocab_init.py [--steps N] [--init-std S]
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=200)
ap.add_argument("--init-std", type=float, default=0.15)
args = ap.parse_args()
torch.manual_seed(0)

VOCAB, DIM = 5000, 256
successor = torch.randint(0, VOCAB, (VOCAB,))  # each word's likely next word


class NextWord(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.mix = nn.Sequential(nn.Linear(DIM, DIM), nn.GELU(), nn.LayerNorm(DIM))
        self.proj = nn.Linear(DIM, VOCAB, bias=False)
        nn.init.normal_(self.proj.weight, std=args.init_std)

    def forward(self, words: torch.Tensor) -> torch.Tensor:
        return self.proj(self.mix(self.tok(words)))


lm = NextWord()
opt = torch.optim.Adam(lm.parameters(), lr=1e-3)
for step in range(args.steps):
    words = torch.randint(0, VOCAB, (128,))
    nxt = torch.where(torch.rand(128) < 0.8, successor[words], torch.randint(0, VOCAB, (128,)))
    loss = F.cross_entropy(lm(words), nxt)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 40 == 0:
        print(f"step {step} loss {loss.item():.3f}")
