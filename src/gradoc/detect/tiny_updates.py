"""tiny_updates: the optimizer does not move the weights.

Needs: per-parameter update and weight norms (params schedule).

Rule (SageMaker Debugger): ||update|| / ||weight|| below ``RATIO`` (1e-8) on every sampled
step after step 0, with at least ``MIN_SAMPLES`` (3) samples, for a weight matrix that gets
gradients. Frozen parameters have no gradient and are never judged. At float32
precision, an update below ~6e-8 of a weight is lost entirely, so such a step is a no-op.
"""

from __future__ import annotations

from ._util import fmt, update_ratios
from .finding import Evidence, Finding, Kind
from .history import History

RATIO = 1e-8
MIN_SAMPLES = 3


def check(h: History) -> list[Finding]:
    stuck = [
        (name, max(s.values), s.steps[0])
        for name, s in update_ratios(h).items()
        if len(s.values) >= MIN_SAMPLES and max(s.values) < RATIO
    ]
    if not stuck:
        return []
    name, peak, step = stuck[0]
    total = len(update_ratios(h))
    return [
        Finding(
            kind=Kind.TINY_UPDATES,
            severity="warning",
            step=step,
            layer=h.module_of(name),
            summary=(
                f"tiny updates: {len(stuck)} of {total} weight matrices never moved by more than "
                f"{fmt(peak)} of their norm (first: {name})"
            ),
            evidence=[
                Evidence(f"largest update/weight ratio of {n}", fmt(p)) for n, p, _ in stuck[:10]
            ]
            + [Evidence("learning rate (group 0)", fmt(h.lr.values[-1]) if h.lr.values else "-")],
        )
    ]
