"""A small pre-norm transformer language model: the small-scale proxy of Wortsman et al. (2023).

Characters of the Python standard library's source (on every machine, no download), a 2-layer
pre-norm transformer with 4 heads of 16 dimensions, AdamW (betas 0.9, 0.95, weight decay 1e-4)
with a linear warm-up. ``--qk-norm`` normalises the queries and keys per head (qk-layernorm)
and ``--z-loss`` adds ``coef * log(Z)^2`` (PaLM's z-loss): the two mitigations of the paper.

    python lm.py --lr 0.3                      # attention logits grow, the loss diverges
    python lm.py --lr 0.3 --qk-norm --z-loss 1e-4

The output logits' drift (``benchmarks/precursors.py --drift``) takes a word vocabulary
(``--words 4096``: the standard library's 4,095 most frequent words and symbols, the rest
one token), an output bias (``--head-bias``), no weight decay (``--weight-decay 0``) and
logits computed in bfloat16 (``--bf16``: the forward under CPU autocast).
"""

import argparse
import collections
import math
import os
import pathlib
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--lr", type=float, default=1e-3)
ap.add_argument("--steps", type=int, default=800)
ap.add_argument("--warmup", type=int, default=200)
ap.add_argument("--qk-norm", action="store_true")
ap.add_argument("--z-loss", type=float, default=0.0)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--words", type=int, default=0, help="a word vocabulary of this size")
ap.add_argument("--head-bias", action="store_true")
ap.add_argument("--bf16", action="store_true")
ap.add_argument("--weight-decay", type=float, default=1e-4)
args = ap.parse_args()

VOCAB, CONTEXT, WIDTH, HEADS, LAYERS, BATCH = args.words or 128, 64, 64, 4, 2, 16


def corpus(size: int = 400_000) -> torch.Tensor:
    """The first ``size`` bytes of the standard library's modules, as ASCII codes."""
    files = sorted(pathlib.Path(os.__file__).parent.glob("*.py"))
    text = b"".join(f.read_bytes() for f in files)[:size]
    return torch.tensor([c if c < VOCAB else ord("?") for c in text], dtype=torch.long)


def words(size: int = 3_000_000) -> torch.Tensor:
    """The standard library's words and symbols, the ``VOCAB - 1`` most frequent each a
    token and the rest token 0."""
    files = sorted(pathlib.Path(os.__file__).parent.glob("*.py"))
    text = "".join(f.read_text(errors="replace") for f in files)[:size]
    found = re.findall(r"\w+|[^\w\s]|\n", text)
    common = [w for w, _ in collections.Counter(found).most_common(VOCAB - 1)]
    ids = {w: i + 1 for i, w in enumerate(common)}
    return torch.tensor([ids.get(w, 0) for w in found], dtype=torch.long)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv, self.proj = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
        self.mlp = nn.Sequential(
            nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH)
        )
        head = WIDTH // HEADS
        norm = (lambda: nn.LayerNorm(head)) if args.qk_norm else nn.Identity
        self.q_norm, self.k_norm = norm(), norm()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(WIDTH, -1)
        q, k, v = (z.view(b, t, HEADS, -1).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(self.q_norm(q), self.k_norm(k), v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, WIDTH))
        return x + self.mlp(self.ln2(x))


class LM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.position = nn.Parameter(torch.zeros(CONTEXT, WIDTH))
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=args.head_bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx) + self.position[: idx.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


torch.manual_seed(args.seed)
tokens = words() if args.words else corpus()
model = LM()
opt = torch.optim.AdamW(
    model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=args.weight_decay
)
warm = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / args.warmup))
batches = torch.Generator().manual_seed(args.seed + 1)
for step in range(args.steps):
    at = torch.randint(0, len(tokens) - CONTEXT - 1, (BATCH,), generator=batches)
    x = torch.stack([tokens[i : i + CONTEXT] for i in at])
    y = torch.stack([tokens[i + 1 : i + CONTEXT + 1] for i in at])
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
        logits = model(x)
    loss = F.cross_entropy(logits.float().view(-1, VOCAB), y.view(-1))
    if args.z_loss:
        loss = loss + args.z_loss * torch.logsumexp(logits.float(), -1).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    warm.step()
    if step % 100 == 0 or step == args.steps - 1:
        print(f"step {step} loss {loss.item():.4f} ({math.exp(min(loss.item(), 50)):.1f} ppl)")
