"""large_updates: one optimizer step moves weights by a large part of their size.

Needs: per-parameter update and weight norms (params schedule).

Rule: for a weight matrix, ||update|| / ||weight|| above ``RATIO`` (0.3) on any sampled step
after step 0 (step 0 is skipped: zero-initialised tensors). Healthy updates are ~1e-3
(Karpathy's rule of thumb; the calibration runs: 1e-4 to 0.1). SageMaker Debugger's
threshold of 10 never fires in practice: once updates are that large the weights grow
with them, and the ratio of an SGD run at learning rate 50 stays near 1.
"""

from __future__ import annotations

from ._util import fmt, update_ratios
from .finding import Finding
from .history import History

RATIO = 0.3


def check(h: History) -> list[Finding]:
    hits = []
    for name, series in update_ratios(h).items():
        over = [(s, r) for s, r in zip(series.steps, series.values) if r > RATIO]
        if over:
            hits.append((over[0][0], name, over[0][1], max(r for _, r in over)))
    if not hits:
        return []
    hits.sort()
    step, name, ratio, peak = hits[0]
    return [
        Finding(
            kind="large_updates",
            severity="warning",
            step=step,
            layer=h.module_of(name),
            summary=(
                f"large updates: a step moved {name} by {fmt(ratio)} of its norm at step {step}"
            ),
            evidence=[
                {"signal": f"update norm / weight norm of {n}", "step": s, "value": fmt(r)}
                for s, n, r, _ in hits[:10]
            ]
            + [{"signal": "highest update/weight ratio", "value": fmt(peak)}],
        )
    ]
