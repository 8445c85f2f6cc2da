"""What locating costs a user in wall time when gradoc must re-run the program: the
automatic fallback (a re-run traced at the failing step, or with every operation checked
when no step was seen) against the same `gradoc run` with it turned off, and against
`--check numerics` in the first run; plain `python SCRIPT` as the baseline.

Programs: tests/programs/ (hand-written updates, an autograd.grad loop, a program that
never trains). Each command runs --repeats times, interleaved; medians are reported, and
each gradoc command's median against plain python's.

    python benchmarks/fallback.py
    python benchmarks/fallback.py --repeats 1
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROGRAMS = Path(__file__).resolve().parents[1] / "tests" / "programs"
SCRIPTS = [
    "logreg_by_hand.py",
    "mlp_by_hand_inf_grad.py",
    "input_by_autograd_grad.py",
    "no_training_nan.py",
]
COMMANDS = {
    "python": [],
    "gradoc run --replay-budget 0": ["run", "--replay-budget", "0"],
    "gradoc run (fallback)": ["run"],
    "gradoc run --check numerics": ["run", "--check", "numerics"],
}


def timed(cmd: list[str], cwd: str) -> float:
    t0 = time.perf_counter()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, check=False, timeout=600)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    print(f"{'program':<28}{'command':<30}{'wall s':>8}{'x python':>10}")
    for script in SCRIPTS:
        times: dict[str, list[float]] = {c: [] for c in COMMANDS}
        for i in range(args.repeats):
            for name, flags in COMMANDS.items():
                with tempfile.TemporaryDirectory() as tmp:
                    if flags:
                        cmd = [sys.executable, "-m", "gradoc", *flags, "--out", f"{tmp}/r{i}"]
                    else:
                        cmd = [sys.executable]
                    times[name].append(timed([*cmd, str(PROGRAMS / script)], tmp))
        base = statistics.median(times["python"])
        for name in COMMANDS:
            wall = statistics.median(times[name])
            print(f"{script:<28}{name:<30}{wall:>8.2f}{wall / base:>10.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
