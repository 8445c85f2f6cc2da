"""Collection cost with many parameter tensors: does it grow with bytes, or with a Python
loop over tensors?

Two models with the same number of parameters (and bytes): ``many`` has 500 parameter
tensors (250 small Linear layers), ``few`` has 10 (5 large Linear layers). Each trains
plain and under ``gradoc.watch`` (defaults), interleaved step by step; reported is the
median over rounds of gradoc's added time per step for each model, and their ratio. If
the cost were all in foreach kernels and one transfer, both would add about the same; the
difference per extra tensor is the per-tensor (Python) part, reported in microseconds.

    python benchmarks/many_tensors.py
    python benchmarks/many_tensors.py --quick
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
from pathlib import Path

import torch
import torch.nn as nn

import gradoc


def chain(layers: int, width: int) -> nn.Sequential:
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.steps = 2, 3
    torch.manual_seed(0)
    # 250 layers of 32x32 (+bias) = 500 tensors; 5 layers of ~226x226 ~ the same parameters
    models = {"many": chain(250, 32), "few": chain(5, 226)}
    sizes = {k: sum(p.numel() for p in m.parameters()) for k, m in models.items()}
    tensors = {k: len(list(m.parameters())) for k, m in models.items()}
    print(
        f"many: {tensors['many']} tensors, {sizes['many']:,} parameters; few: {tensors['few']} "
        f"tensors, {sizes['few']:,} parameters",
        file=sys.stderr,
    )
    variants = {}
    for k, m in models.items():
        for watched in (False, True):
            model = copy.deepcopy(m)
            opt = torch.optim.SGD(model.parameters(), lr=1e-4)
            variants[(k, watched)] = (model, opt, 32 if k == "many" else 226)
    medians: dict[tuple[str, bool], list[float]] = {key: [] for key in variants}
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        runs = [
            gradoc.watch(model, opt, out=Path(tmp) / k)
            for (k, watched), (model, opt, _) in variants.items()
            if watched
        ]
        for _ in range(args.rounds):
            times: dict[tuple[str, bool], list[float]] = {key: [] for key in variants}
            for _ in range(args.steps):
                order = list(variants)
                rng.shuffle(order)  # no variant always runs first (caches, allocator)
                for key in order:
                    model, opt, width = variants[key]
                    x = torch.randn(64, width)
                    t = time.perf_counter()
                    loss = model(x).pow(2).mean()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    times[key].append(time.perf_counter() - t)
            for key in variants:
                medians[key].append(statistics.median(times[key]))
        for run in runs:
            run.close()
    keep = slice(1, None) if args.rounds > 1 else slice(None)
    added = {
        k: statistics.median(
            w - p for w, p in zip(medians[(k, True)][keep], medians[(k, False)][keep])
        )
        for k in models
    }
    print(f"{'model':<6}{'tensors':>9}{'plain ms':>10}{'gradoc ms':>11}{'added ms':>10}")
    for k in models:
        plain = statistics.median(medians[(k, False)][keep]) * 1e3
        watched = statistics.median(medians[(k, True)][keep]) * 1e3
        print(f"{k:<6}{tensors[k]:>9}{plain:>10.2f}{watched:>11.2f}{added[k] * 1e3:>10.3f}")
    ratio = added["many"] / added["few"] if added["few"] > 0 else float("inf")
    per_tensor = (added["many"] - added["few"]) / (tensors["many"] - tensors["few"])
    print(
        f"added cost, 500 tensors vs 10 (same bytes): {ratio:.1f}x for 50x the tensors; "
        f"{per_tensor * 1e6:.1f} us per extra tensor"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"added_s": added, "ratio": ratio, "per_tensor_s": per_tensor})
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
