"""Before/after: which findings went away, the two loss curves, what the fix cost."""

from __future__ import annotations

import itertools
import math
import statistics
from pathlib import Path
from typing import Any

from ..store import open_run


def _key(f: dict[str, Any]) -> tuple[str, str | None]:
    return f["kind"], f.get("layer")


def _side(run_dir: Path, report: dict[str, Any]) -> dict[str, Any]:
    with open_run(run_dir) as log:
        loss, times = log.scalar("loss"), log.scalar("time").values
    finite = [v for v in loss.values if math.isfinite(v)]
    tail = finite[-max(1, len(finite) // 10) :] if finite else []
    bad = next((s for s, v in zip(loss.steps, loss.values) if not math.isfinite(v)), None)
    deltas = [b - a for a, b in itertools.pairwise(times)]
    info = report["run"]
    steps, duration = info.get("steps") or 0, info.get("duration_s")
    return {
        "dir": str(run_dir),
        "status": report["status"],
        "exit_code": info.get("exit_code"),
        "steps": steps,
        "duration_s": duration,
        # the median step, not the mean: one-off costs (imports, the first replay) left out
        "s_per_step": statistics.median(deltas) if deltas else None,
        "final_loss": statistics.median(tail) if tail else None,
        "first_nonfinite_loss": bad,
        "loss": loss.values,
        "guard": info.get("guard"),
    }


def compare(
    before_dir: Path,
    before: dict[str, Any],
    after_dir: Path,
    after: dict[str, Any],
) -> dict[str, Any]:
    """The comparison of two reports of the same script (``fix.json``)."""
    serious = ("error", "warning")
    b = {_key(f): f for f in before["findings"] if f["severity"] in serious}
    a = {_key(f): f for f in after["findings"] if f["severity"] in serious}

    def brief(f: dict[str, Any]) -> dict[str, Any]:
        return {k: f.get(k) for k in ("kind", "layer", "severity", "step", "summary")}

    sides = {"before": _side(before_dir, before), "after": _side(after_dir, after)}
    cost = None
    if sides["before"]["s_per_step"] and sides["after"]["s_per_step"]:
        cost = sides["after"]["s_per_step"] / sides["before"]["s_per_step"]
    return {
        "schema": "gradoc.fix/1",
        "disappeared": [brief(f) for k, f in b.items() if k not in a],
        "remaining": [brief(f) for k, f in a.items() if k in b],
        "new": [brief(f) for k, f in a.items() if k not in b],
        **sides,
        "time_per_step_ratio": cost,
    }
