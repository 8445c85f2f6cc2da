"""Overhead of gradoc against plain training, measured side by side in one process.

Reference workload (issue 2): a 6-layer pre-norm transformer encoder classifier,
d_model 256, 4 heads, batch 16 x 64 tokens, AdamW, on the CPU. Variants:

- plain                     the loop alone (the baseline)
- gradoc default            gradoc.watch() with its defaults
- gradoc activations/step   gradoc.watch(activations=every(1))
- gradoc guard              gradoc.watch(guard=True): monitoring plus the guard (ZClip on
                            every step, snapshots every 100 steps)
- naive per-param loop      mean/std/max/min/norm of every gradient with .item() each
- detect_anomaly            torch.autograd.detect_anomaly() around forward and backward
- check_numerics            gradoc.check_numerics() around forward and backward: every
                            op's output checked (what `gradoc run --check numerics` does)

The variants are interleaved step by step: each round runs --steps steps of every
variant, each step of each variant in a shuffled order, each variant on its own copy of
the same model and data (so slow drifts of the machine hit all variants alike). A gradoc
variant's run stays open for the whole benchmark, as in a real run; its hooks sit on its
own model and optimizer, so the other variants meet gradoc's backward tap (one Python
call per backward, ~1 us of a ~250 ms step) and, on steps that collect activations, the
global forward hook that collects them (each module call of the process takes
nn.Module's hooked path then: a few us, ~0.1% of a step here). A variant's time in a round is the
mean of its steps, so work done on some steps only (activations every 10 steps) is
counted. Reported per variant: the median over rounds of that mean step time, and the
median over rounds of (variant / plain) in the same round, with its range.

    python benchmarks/overhead.py                 # the reference workload
    python benchmarks/overhead.py --quick         # a smoke run on a tiny model
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

import gradoc

warnings.filterwarnings("ignore")


class Classifier(nn.Module):
    def __init__(self, vocab: int, d_model: int, heads: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        layer = nn.TransformerEncoderLayer(
            d_model, heads, 4 * d_model, dropout=0.1, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, 2)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.norm(self.encoder(self.embed(tokens))).mean(1))
        return out


def naive_stats(model: nn.Module) -> None:
    for p in model.parameters():
        if p.grad is not None:
            g = p.grad
            [g.mean().item(), g.std().item(), g.max().item(), g.min().item(), g.norm().item()]


GRADOC: dict[str, dict[str, object]] = {
    "gradoc default": {},
    "gradoc activations/step": {"activations": 1},
    "gradoc guard": {"guard": True},
}
VARIANTS = [
    "plain",
    "gradoc default",
    "gradoc activations/step",
    "gradoc guard",
    "naive per-param loop",
    "detect_anomaly",
    "check_numerics",
]


def step(
    variant: str, model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor
) -> float:
    """One training step of a variant; returns its time in seconds."""
    anomaly: Callable[[], object] = {
        "detect_anomaly": torch.autograd.detect_anomaly,
        "check_numerics": lambda: gradoc.check_numerics(raise_error=False),
    }.get(variant, nullcontext)
    t0 = time.perf_counter()
    with anomaly():  # type: ignore[attr-defined]
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
    if variant == "naive per-param loop":
        naive_stats(model)
    opt.step()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--rounds", type=int, default=16, help="interleaved rounds (the first is warm-up)"
    )
    ap.add_argument("--steps", type=int, default=10, help="steps per variant per round")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset")
    ap.add_argument("--quick", action="store_true", help="tiny model, 2 rounds: a smoke test")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = ap.parse_args(argv)
    dims = dict(vocab=8000, d_model=256, heads=4, layers=6, batch=16, tokens=64)
    if args.quick:
        dims = dict(vocab=100, d_model=16, heads=2, layers=1, batch=4, tokens=8)
        args.rounds, args.steps = 2, 3
    variants = [v.strip() for v in args.variants.split(",")]
    unknown = set(variants) - set(VARIANTS)
    if unknown or "plain" not in variants:
        ap.error(f"variants must include 'plain' and come from {VARIANTS}")

    torch.manual_seed(0)
    base = Classifier(dims["vocab"], dims["d_model"], dims["heads"], dims["layers"])
    models = {v: copy.deepcopy(base) for v in variants}
    opts = {v: torch.optim.AdamW(models[v].parameters(), lr=1e-4) for v in variants}
    g = torch.Generator().manual_seed(1)
    data = [
        (
            torch.randint(0, dims["vocab"], (dims["batch"], dims["tokens"]), generator=g),
            torch.randint(0, 2, (dims["batch"],), generator=g),
        )
        for _ in range(args.steps)
    ]
    print(
        f"workload: {dims['layers']}-layer pre-norm transformer, d_model {dims['d_model']}, "
        f"batch {dims['batch']}x{dims['tokens']}, AdamW, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; {args.rounds} rounds x {args.steps} steps",
        file=sys.stderr,
    )
    medians: dict[str, list[float]] = {v: [] for v in variants}
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        runs = [
            gradoc.watch(models[v], opts[v], out=Path(tmp) / v.replace("/", "_"), **options)
            for v, options in GRADOC.items()
            if v in variants
        ]
        for r in range(args.rounds):
            times: dict[str, list[float]] = {v: [] for v in variants}
            for x, y in data:  # every variant takes step i before any takes step i + 1
                order = variants[:]
                rng.shuffle(order)
                for v in order:
                    times[v].append(step(v, models[v], opts[v], x, y))
            for v in variants:
                medians[v].append(statistics.fmean(times[v]))
            print(f"  round {r + 1}/{args.rounds} done", file=sys.stderr)
        for run in runs:
            run.close()
    keep = slice(1, None) if args.rounds > 1 else slice(None)  # round 1 warms up
    results = []
    for v in variants:
        ratios = [m / p for m, p in zip(medians[v][keep], medians["plain"][keep])]
        results.append(
            {
                "variant": v,
                "median_step_ms": 1000 * statistics.median(medians[v][keep]),
                "ratio_vs_plain": statistics.median(ratios),
                "ratio_min": min(ratios),
                "ratio_max": max(ratios),
            }
        )
    print(f"{'variant':<26}{'step ms':>10}{'x plain':>10}   (range over rounds)")
    for row in results:
        print(
            f"{row['variant']:<26}{row['median_step_ms']:>10.1f}{row['ratio_vs_plain']:>10.3f}"
            f"   ({row['ratio_min']:.3f} - {row['ratio_max']:.3f})"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"workload": dims, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
