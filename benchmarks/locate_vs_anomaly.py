"""gradoc's localisation against torch.autograd.detect_anomaly on the same bugs.

For every bug of tests/bugs.py: does each tool point at the right line (and, for gradoc,
the right op, module and phase)? detect_anomaly wraps forward and backward of every step,
as its documentation suggests; its answer is the innermost user frame of the forward
traceback it prints when a backward function returns NaN. Then the cost of each on
healthy steps of a small MLP, interleaved (see benchmarks/overhead.py for the reference
transformer: gradoc 1.015x, detect_anomaly 1.414x).

    python benchmarks/locate_vs_anomaly.py
    python benchmarks/locate_vs_anomaly.py --quick   # fewer healthy steps
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.bugs import BUGS, HERE, Bug, line_of

import gradoc
from gradoc.locate.origin import frame_from_text

STEPS = 8


def with_gradoc(bug: Bug) -> tuple[bool, str]:
    torch.manual_seed(0)
    model, opt, step = bug.make()
    with tempfile.TemporaryDirectory() as tmp:
        # a value born outside any module is caught at its next occurrence, which only a
        # skipped update leaves possible (see tests/bugs.py, Bug.skip)
        skip = bug.skip or None
        with gradoc.watch(model, opt, out=Path(tmp) / "run", skip_nonfinite_updates=skip) as run:
            for s in range(STEPS):
                opt.zero_grad()
                step(s).backward()
                opt.step()
        report = json.loads((run.dir / "report.json").read_text())
    origin = next((f["origin"] for f in report["findings"] if f.get("origin")), None)
    if origin is None:
        return False, "no origin"
    ok = origin["phase"] == bug.phase and (bug.op is None or origin["op"] == bug.op)
    if bug.marker is not None:
        ok = ok and origin["file"] == str(HERE) and origin["line"] == line_of(bug.marker)
    where = f"{origin['phase']} {origin['op']} line {origin['line']}"
    return ok, where


def with_anomaly(bug: Bug) -> tuple[bool, str]:
    torch.manual_seed(0)
    _model, opt, step = bug.make()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            for s in range(STEPS):
                opt.zero_grad()
                with torch.autograd.detect_anomaly(check_nan=True):
                    step(s).backward()
                opt.step()
        except RuntimeError as exc:
            text = "".join(str(w.message) for w in caught)
            frame = frame_from_text(text)
            said = str(exc).split(".")[0]
            if frame is None:
                return False, said
            ok = (
                bug.marker is not None and frame[0] == str(HERE) and frame[1] == line_of(bug.marker)
            )
            return ok, f"{said}; line {frame[1]}"
    return False, "raised nothing"


def healthy_cost(steps: int = 200, rounds: int = 5) -> dict[str, float]:
    torch.manual_seed(0)
    times: dict[str, list[float]] = {"plain": [], "gradoc": [], "detect_anomaly": []}
    models = {
        k: nn.Sequential(
            nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1)
        )
        for k in times
    }
    opts = {k: torch.optim.Adam(m.parameters(), 1e-3) for k, m in models.items()}
    with tempfile.TemporaryDirectory() as tmp:
        run = gradoc.watch(models["gradoc"], opts["gradoc"], out=Path(tmp) / "run")
        for _ in range(rounds):
            for k in times:
                m, o = models[k], opts[k]
                t0 = time.perf_counter()
                for _ in range(steps):
                    x = torch.randn(32, 64)
                    o.zero_grad()
                    if k == "detect_anomaly":
                        with torch.autograd.detect_anomaly():
                            m(x).pow(2).mean().backward()
                    else:
                        m(x).pow(2).mean().backward()
                    o.step()
                times[k].append((time.perf_counter() - t0) / steps)
        run.close()
    plain = statistics.median(times["plain"])
    return {k: statistics.median(v) / plain for k, v in times.items()}


def main(argv: list[str] | None = None) -> int:
    quick = "--quick" in (sys.argv[1:] if argv is None else argv)  # fewer healthy steps
    warnings.filterwarnings("ignore")
    print(f"{'bug':<48}{'gradoc':<36}{'detect_anomaly'}")
    score = {"gradoc": 0, "anomaly": 0}
    for bug in BUGS.values():
        g_ok, g_said = with_gradoc(bug)
        a_ok, a_said = with_anomaly(bug)
        score["gradoc"] += g_ok
        score["anomaly"] += a_ok
        mark = lambda ok: "✓" if ok else "✗"  # noqa: E731
        print(f"{bug.title[:46]:<48}{mark(g_ok)} {g_said[:33]:<34}{mark(a_ok)} {a_said[:60]}")
    n = len(BUGS)
    print(f"located: gradoc {score['gradoc']}/{n}, detect_anomaly {score['anomaly']}/{n}")
    cost = healthy_cost(steps=20, rounds=1) if quick else healthy_cost()
    print(
        "healthy-step cost vs plain (small MLP): "
        + ", ".join(f"{k} {v:.2f}x" for k, v in cost.items())
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
