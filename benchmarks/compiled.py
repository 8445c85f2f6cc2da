"""Overhead of gradoc on a torch.compile'd model against its overhead on the same model
uncompiled, measured side by side in one process.

Workload: a 4-layer MLP-mixer-like stack (Linear 512 -> 2048 -> 512, GELU, LayerNorm,
residual), batch 64, AdamW, on the CPU; compiled with the default (inductor) backend.
Variants, interleaved step by step in shuffled order (see benchmarks/overhead.py):

- eager                 the uncompiled loop (baseline of the eager pair)
- eager + gradoc        gradoc.watch() on it
- compiled              torch.compile(model) (baseline of the compiled pair)
- compiled + gradoc     gradoc.watch() on the compiled model: gradoc hooks the wrapper,
                        which runs eagerly; its hooks inside the compiled graph do nothing
                        (no graph break), so per-module activations are not collected there

Reported: median step time and the median over rounds of each gradoc variant against its
own baseline in the same round.

    python benchmarks/compiled.py            # ~3 minutes, most of it compiling
    python benchmarks/compiled.py --quick    # a tiny model, the eager backend
"""

from __future__ import annotations

import argparse
import copy
import random
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

import gradoc

warnings.filterwarnings("ignore")


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Net(nn.Module):
    def __init__(self, d: int, layers: int) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*[Block(d) for _ in range(layers)])
        self.head = nn.Linear(d, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.blocks(x))
        return out


PAIRS = {"eager + gradoc": "eager", "compiled + gradoc": "compiled"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    d, layers, batch, backend = 512, 4, 64, "inductor"
    if args.quick:
        d, layers, batch, backend = 32, 1, 8, "eager"
        args.rounds, args.steps = 2, 3
    torch.set_num_threads(1)
    torch.manual_seed(0)
    base = Net(d, layers)
    variants = ["eager", "eager + gradoc", "compiled", "compiled + gradoc"]
    models: dict[str, nn.Module] = {}
    for v in variants:
        m = copy.deepcopy(base)
        models[v] = torch.compile(m, backend=backend) if v.startswith("compiled") else m
    opts = {v: torch.optim.AdamW(models[v].parameters(), lr=1e-4) for v in variants}
    g = torch.Generator().manual_seed(1)
    data = [
        (torch.randn(batch, d, generator=g), torch.randint(0, 10, (batch,), generator=g))
        for _ in range(args.steps)
    ]

    def step(v: str, x: torch.Tensor, y: torch.Tensor) -> float:
        t0 = time.perf_counter()
        loss = F.cross_entropy(models[v](x), y)
        opts[v].zero_grad()
        loss.backward()
        opts[v].step()
        return time.perf_counter() - t0

    print(f"workload: {layers} blocks d={d}, batch {batch}, {backend}", file=sys.stderr)
    t0 = time.perf_counter()
    for v in variants:  # compile outside the measured rounds
        step(v, *data[0])
    print(f"  warm-up (compiling) {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    means: dict[str, list[float]] = {v: [] for v in variants}
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        runs = [
            gradoc.watch(models[v], opts[v], out=Path(tmp) / v.replace(" ", "_").replace("+", ""))
            for v in PAIRS
        ]
        for r in range(args.rounds):
            times: dict[str, list[float]] = {v: [] for v in variants}
            for x, y in data:
                order = variants[:]
                rng.shuffle(order)
                for v in order:
                    times[v].append(step(v, x, y))
            for v in variants:
                means[v].append(statistics.fmean(times[v]))
            print(f"  round {r + 1}/{args.rounds} done", file=sys.stderr)
        for run in runs:
            run.close()
    keep = slice(1, None) if args.rounds > 1 else slice(None)
    print(f"{'variant':<20}{'step ms':>10}{'x baseline':>12}")
    for v in variants:
        ms = 1000 * statistics.median(means[v][keep])
        base_v = PAIRS.get(v)
        ratio = (
            statistics.median(a / b for a, b in zip(means[v][keep], means[base_v][keep]))
            if base_v
            else 1.0
        )
        print(f"{v:<20}{ms:>10.1f}{ratio:>12.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
