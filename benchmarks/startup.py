"""The fixed cost of ``gradoc run``: what start-up and close add to a short script.

A 40-step script (a 3-layer MLP, AdamW; it trains in a fraction of its run time, most of
which is importing torch) is run as ``python train.py`` and as ``gradoc run train.py``
(which writes the run log, report.json and report.html and prints the diagnosis), the two
interleaved over ``--rounds`` rounds in fresh processes; the table gives the median wall
time of each and the median of the per-round differences: the seconds gradoc adds.

    python benchmarks/startup.py
    python benchmarks/startup.py --quick
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = """
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                      nn.Linear(128, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range({steps}):
    x = torch.randn(64, 32)
    loss = F.mse_loss(model(x), x.sum(1, keepdim=True))
    opt.zero_grad()
    loss.backward()
    opt.step()
print("loss", loss.item())
"""


def _gradoc() -> list[str]:
    exe = shutil.which("gradoc", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "gradoc"]


def timed(cmd: list[str], cwd: Path) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    t = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    took = time.perf_counter() - t
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed (rc {done.returncode}):\n{done.stderr[-3000:]}")
    return took


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 1 round")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    rounds = 1 if args.quick else args.rounds
    plain, watched, added = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        (cwd / "train.py").write_text(SCRIPT.format(steps=args.steps))
        for i in range(rounds):
            pair = [
                ("plain", [sys.executable, "train.py"]),
                ("gradoc", [*_gradoc(), "run", "--out", f"run{i}", "train.py"]),
            ]
            if i % 2:  # neither always runs first
                pair.reverse()
            took = {name: timed(cmd, cwd) for name, cmd in pair}
            plain.append(took["plain"])
            watched.append(took["gradoc"])
            added.append(took["gradoc"] - took["plain"])
            print(
                f"round {i + 1}: plain {took['plain']:.2f} s, gradoc run {took['gradoc']:.2f} s",
                file=sys.stderr,
            )
        assert (cwd / "run0" / "report.html").exists()  # what the close wrote
    result = {
        "steps": args.steps,
        "rounds": rounds,
        "plain_s": statistics.median(plain),
        "gradoc_run_s": statistics.median(watched),
        "added_s": statistics.median(added),
        "added_range_s": [min(added), max(added)],
    }
    print(
        f"{args.steps}-step script: plain {result['plain_s']:.2f} s, gradoc run "
        f"{result['gradoc_run_s']:.2f} s: adds {result['added_s']:.2f} s "
        f"({min(added):.2f} to {max(added):.2f}; median of {rounds} rounds)"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
