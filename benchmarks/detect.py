"""Cost of detection and diagnosis, which run on the finished run log, not during training.

Trains a small MLP for --steps steps under gradoc.watch (the default schedules), then
times, on the finished log: loading the History, running every detector, and building
the whole report (detectors + diagnosis). Training itself never calls a detector
(tests/test_diagnose.py checks it), so their per-step cost during training is zero;
this measures what `gradoc report` and the end of `gradoc run` pay instead.

    python benchmarks/detect.py              # 5,000 steps
    python benchmarks/detect.py --quick      # a smoke run
"""

from __future__ import annotations

import argparse
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
from gradoc.detect import History
from gradoc.findings import check_all
from gradoc.report import build_report

warnings.filterwarnings("ignore")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.steps, args.repeat = 200, 1
    torch.manual_seed(0)
    model = nn.Sequential(
        *[m for _ in range(8) for m in (nn.Linear(64, 64), nn.ReLU())], nn.Linear(64, 1)
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        with gradoc.watch(model, opt, out=Path(tmp) / "run") as run:
            for _ in range(args.steps):
                x = torch.randn(32, 64)
                loss = F.mse_loss(model(x), x[:, :1])
                opt.zero_grad()
                loss.backward()
                opt.step()
        train_s = time.perf_counter() - t0
        timings: dict[str, list[float]] = {"load history": [], "detectors": [], "full report": []}
        for _ in range(args.repeat):
            with gradoc.open_run(run.dir) as log:
                t = time.perf_counter()
                h = History.load(log)
                timings["load history"].append(time.perf_counter() - t)
                t = time.perf_counter()
                check_all(h)
                timings["detectors"].append(time.perf_counter() - t)
                t = time.perf_counter()
                build_report(log)
                timings["full report"].append(time.perf_counter() - t)
        rows = sum(len(s.steps) for p in h.param_stats.values() for s in p.values())
    print(
        f"{args.steps} steps, {len(h.params)} parameters, {len(h.modules)} modules, "
        f"{rows} per-parameter values; training took {train_s:.1f} s",
        file=sys.stderr,
    )
    print(f"{'phase':<14}{'median s':>10}{'ms per step':>14}")
    for name, ts in timings.items():
        med = statistics.median(ts)
        print(f"{name:<14}{med:>10.3f}{1000 * med / args.steps:>14.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
