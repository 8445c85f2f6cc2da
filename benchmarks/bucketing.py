"""Padding and throughput: random batching vs length buckets vs a token budget.

A realistic heavy-tailed length distribution (log-normal, median ~13 tokens, a tail to
256, some one-token posts: the demo's posts at a larger scale), a small transformer
encoder trained for one pass over the data with a key padding mask. Per batching scheme:
the padding ratio (padded tokens / all tokens computed), batches, and the training
throughput in real (non-pad) tokens per second, measured in the same process.

    python benchmarks/bucketing.py            # 8,000 sequences
    python benchmarks/bucketing.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from gradoc.data import LengthBucketSampler, TokenBudgetBatchSampler


def lengths(n: int, longest: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    out = torch.exp(torch.randn(n, generator=g) * 0.9 + 2.6).round().clamp(1, longest).long()
    return out


class Model(nn.Module):
    def __init__(self, d: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(1000, d, padding_idx=0)
        layer = nn.TransformerEncoderLayer(d, 4, 2 * d, 0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(d, 2)

    def forward(self, t: torch.Tensor, pads: torch.Tensor) -> torch.Tensor:
        h = self.encoder(self.embed(t), src_key_padding_mask=pads)
        keep = (~pads)[..., None].float()
        out: torch.Tensor = self.head((h * keep).sum(1) / keep.sum(1))
        return out


def run(batches: list[list[int]], lens: torch.Tensor, limit: int) -> dict[str, float]:
    torch.manual_seed(0)
    model = Model()
    opt = torch.optim.AdamW(model.parameters(), 1e-3)
    real = padded = 0
    start = time.perf_counter()
    for b in batches[:limit]:
        n = lens[b]
        width = int(n.max())
        pads = torch.arange(width)[None] >= n[:, None]
        t = torch.randint(1, 1000, (len(b), width)).masked_fill(pads, 0)
        loss = F.cross_entropy(model(t, pads), (n % 2).long())
        opt.zero_grad()
        loss.backward()
        opt.step()
        real += int(n.sum())
        padded += width * len(b)
    seconds = time.perf_counter() - start
    return {
        "padding_ratio": 1 - real / padded,
        "batches": min(limit, len(batches)),
        "tokens_per_s": real / seconds,
        "seconds": seconds,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    n, longest, batch = (8000, 256, 32) if not args.quick else (400, 64, 16)
    lens = lengths(n, longest)
    g = torch.Generator().manual_seed(1)
    perm = torch.randperm(n, generator=g).tolist()
    schemes = {
        "random": [perm[i : i + batch] for i in range(0, n, batch)],
        "length buckets": list(LengthBucketSampler(lens, batch, seed=1)),
        "token budget": list(TokenBudgetBatchSampler(lens, batch * 48, seed=1)),
    }
    print(
        f"{n} sequences, lengths median {int(lens.median())}, max {int(lens.max())}, "
        f"{int((lens <= 2).sum())} of length <= 2; batch {batch} (token budget "
        f"{batch * 48}); torch {torch.__version__}, {torch.get_num_threads()} threads",
        file=sys.stderr,
    )
    limit = 10**9
    results = {}
    print(f"{'batching':<16}{'padding':>9}{'batches':>9}{'real tok/s':>12}{'x random':>10}")
    for name, batches in schemes.items():
        results[name] = run(batches, lens, limit)
    base = results["random"]["tokens_per_s"]
    for name, r in results.items():
        print(
            f"{name:<16}{r['padding_ratio']:>9.1%}{r['batches']:>9}{r['tokens_per_s']:>12.0f}"
            f"{r['tokens_per_s'] / base:>10.2f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
