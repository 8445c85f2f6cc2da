"""accumulating_gradients: each step's gradient is the running sum of all earlier ones.

Needs: the global gradient norm per step.

A loop that lost its ``optimizer.zero_grad()`` (or clears gradients once, outside the
loop) adds every step's gradient to the ones before: the gradient the optimizer sees at
step t is ``g_0 + ... + g_t``. While the gradients share a direction, its norm grows in
proportion to the steps taken, from the first step on: about (t+1) times the first step's
norm at step t. That signature is unlike the others: an explosion grows geometrically and
later, a healthy run's norm moves within a small factor of its start.

Rule: over the first ``EARLY`` (20) steps, the norm rises at least ``RISE`` (a third) as
fast as the running sum of equal gradients would, i.e. ``G[EARLY-1] / G[0] >= EARLY / 3``,
steadily (a Spearman rank correlation with the step of at least ``MONOTONE``, 0.9), and
it ends the run at least ``END`` (10) times its first value. A character GRU without
``zero_grad`` (tests/shapes/no_zero_grad.py): 0.17, 0.86 at step 6, 1.51 at 12, 6.2 at 114;
the same loop with it: 0.16-0.18 throughout.
"""

from __future__ import annotations

import math

from ._util import fmt
from .finding import Evidence, Finding, Kind
from .history import History

EARLY = 20
RISE = 1 / 3
MONOTONE = 0.9
END = 10.0


def _spearman(values: list[float]) -> float:
    n = len(values)
    order = sorted(range(n), key=values.__getitem__)
    rank = [0] * n
    for r, i in enumerate(order):
        rank[i] = r
    d2 = sum((rank[i] - i) ** 2 for i in range(n))
    return 1 - 6 * d2 / (n * (n * n - 1))


def check(h: History) -> list[Finding]:
    steps, values = h.grad_norm.steps, h.grad_norm.values
    if len(values) < EARLY or steps[:EARLY][-1] != steps[0] + EARLY - 1:
        return []  # needs every one of the first steps
    early = values[:EARLY]
    first = early[0]
    if not all(math.isfinite(v) for v in early) or not first > 0:
        return []
    growth = early[-1] / first
    tail = [v for v in values[-max(3, len(values) // 10) :] if math.isfinite(v)]
    end = min(tail) / first if tail else math.inf
    rho = _spearman(early)
    if growth < RISE * EARLY or rho < MONOTONE or end < END:
        return []
    return [
        Finding(
            kind=Kind.ACCUMULATING_GRADIENTS,
            severity="error",
            step=steps[0],
            layer=None,
            summary=(
                f"accumulating gradients: the gradient norm grew {fmt(growth)}x over the first "
                f"{EARLY} steps, steadily, as a running sum of every step's gradient does "
                f"(gradients not cleared between steps?), and ended at {fmt(end)}x its first value"
            ),
            evidence=[
                Evidence("global gradient norm at the first step", fmt(first)),
                Evidence(
                    f"global gradient norm at step {steps[EARLY - 1]} / at the first",
                    fmt(growth),
                    step=steps[EARLY - 1],
                ),
                Evidence("rank correlation of the norm with the step, first steps", round(rho, 3)),
                Evidence("gradient norm at the end / at the first step", fmt(end)),
            ],
            details={"growth": growth, "steps": EARLY, "rho": rho, "end_ratio": end},
        )
    ]
