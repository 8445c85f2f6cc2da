"""loss_plateau: the loss is not going down: the model is not learning.

Needs: the per-step loss.

Rule: with at least ``MIN_STEPS`` (100) finite losses, compare the median of the first 10%
(at least 5 steps) with the median of the last 25%; a plateau is an improvement below
``MIN_GAIN`` (2%) that is not a rise (a rise is a divergence). Calibration: labels
independent of the inputs give 0.7% over 400 steps; healthy runs improve by 12% or more
over the same length. Runs whose loss is already ~0 are left alone.
"""

from __future__ import annotations

import statistics

from ._util import finite, fmt
from .finding import Finding
from .history import History

MIN_STEPS = 100
MIN_GAIN = 0.02


def check(h: History) -> list[Finding]:
    steps, values = finite(h.loss)
    if len(values) < MIN_STEPS:
        return []
    early = statistics.median(values[: max(5, len(values) // 10)])
    late = statistics.median(values[-max(5, len(values) // 4) :])
    if abs(early) < 1e-6 or late > 1.5 * early:
        return []
    gain = (early - late) / abs(early)
    if gain >= MIN_GAIN:
        return []
    return [
        Finding(
            kind="loss_plateau",
            severity="warning",
            step=steps[0],
            layer=None,
            summary=(
                f"loss plateau: {fmt(early)} at the start, {fmt(late)} over the last "
                f"{len(values) // 4} steps ({gain:.1%} better in {len(values)} steps)"
            ),
            evidence=[
                {"signal": "median loss, first 10% of steps", "value": fmt(early)},
                {"signal": "median loss, last 25% of steps", "value": fmt(late)},
                {"signal": "relative improvement", "value": round(gain, 4)},
            ],
        )
    ]
