"""A sentiment classifier whose positional encoding divides by zero on one-token posts.

The data set is generated at run time (no download): posts are token sequences with
heavy-tailed lengths (log-normal, a few one- and two-token posts), labelled by the
balance of "positive" and "negative" tokens they contain. The encoding normalises each
position by the post's own length, ``pos / (length - 1)``, which is 0/0 for a post of
one token: the first batch holding one turns the loss NaN.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

NAME = "nan-posenc"
TITLE = "transformer sentiment classifier; positional encoding divides by zero on 1-token posts"

VOCAB, D_MODEL, MAX_LEN = 512, 64, 64


def make_posts(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token ids (padded with 0), lengths and labels of ``n`` synthetic posts."""
    g = torch.Generator().manual_seed(seed)
    # log-normal lengths (median ~13 tokens, a tail to MAX_LEN); one post in 500 is one token
    lengths = torch.exp(torch.randn(n, generator=g) * 0.8 + 2.6).round().clamp(2, MAX_LEN).long()
    lengths[torch.rand(n, generator=g) < 0.002] = 1
    tokens = torch.randint(3, VOCAB, (n, MAX_LEN), generator=g)
    tokens[torch.arange(MAX_LEN) >= lengths[:, None]] = 0
    positive = ((tokens >= 3) & (tokens < 40)).sum(1)
    negative = ((tokens >= 40) & (tokens < 77)).sum(1)
    labels = (positive >= negative).long()
    return tokens, lengths, labels


class LengthNormalisedEncoding(nn.Module):
    """Sinusoidal encoding of each position relative to its post's length."""

    def __init__(self, d_model: int, fixed: bool = False) -> None:
        super().__init__()
        self.fixed = fixed
        freqs = torch.exp(torch.arange(0, d_model, 2) * (-math.log(100.0) / d_model))
        self.freqs: torch.Tensor
        self.register_buffer("freqs", freqs)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(x.shape[1], device=x.device, dtype=x.dtype)[None, :]
        span = (lengths - 1).to(x.dtype)[:, None]
        if self.fixed:
            span = span.clamp(min=1.0)
        rel = pos / span  # BUG: span is 0 for one-token posts, and 0/0 is NaN
        angles = rel[..., None] * self.freqs * MAX_LEN
        enc = torch.cat([angles.sin(), angles.cos()], dim=-1)
        return x + enc


class SentimentClassifier(nn.Module):
    def __init__(self, fixed: bool = False) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL, padding_idx=0)
        self.pos_encoding = LengthNormalisedEncoding(D_MODEL, fixed)
        layer = nn.TransformerEncoderLayer(
            D_MODEL, 4, 4 * D_MODEL, 0.0, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(D_MODEL, 2)

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        pad = tokens == 0
        h = self.encoder(self.pos_encoding(self.embed(tokens), lengths), src_key_padding_mask=pad)
        h = h.masked_fill(pad[..., None], 0.0).sum(1) / lengths[:, None]
        out: torch.Tensor = self.head(h)
        return out


def run(out: Path | None, fixed: bool = False, steps: int = 150, batch: int = 32) -> int:
    import gradoc

    from ..cli import print_run_summary
    from ..collect import prepare_run_dir

    torch.manual_seed(0)
    tokens, lengths, labels = make_posts(steps * batch, seed=0)
    model = SentimentClassifier(fixed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    print(f"gradoc demo {NAME}: {TITLE}")
    run_ = gradoc.watch(model, opt, out=prepare_run_dir(out, f"demo-{NAME}"))
    bad_steps = 0
    for step in range(steps):
        sl = slice(step * batch, (step + 1) * batch)
        loss = F.cross_entropy(model(tokens[sl], lengths[sl]), labels[sl])
        opt.zero_grad()
        loss.backward()
        opt.step()
        value = loss.item()
        if step % 10 == 0 or not math.isfinite(value):
            print(f"  step {step:4d}  loss {value:.4f}")
        bad_steps += not math.isfinite(value)
        if bad_steps >= 3:
            print("  loss is non-finite: stopping")
            break
    report = run_.close()
    assert report is not None
    print_run_summary(run_.dir, report, stderr=False)
    print(f"report   {run_.dir / 'report.json'}")
    return 0
