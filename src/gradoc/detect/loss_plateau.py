"""loss_plateau: the loss is not going down: the model is not learning.

Needs: the per-step loss (per sample when it is a sum over samples; see
``_util.loss_trend``).

Rule: with at least ``MIN_STEPS`` (100) finite losses, compare the median of the first 10%
(at least 5 steps) with the median of the last 25%; a plateau is an improvement below
``MIN_GAIN`` (2%) that is not a rise (a rise is a divergence). Calibration: labels
independent of the inputs give 0.7% over 400 steps; healthy runs improve by 12% or more
over the same length. Runs whose loss is already ~0 are left alone. The onset is the
first step of the last 25%: from there on the loss is known not to improve (so a plateau
that follows a blow-up is seen to follow it).

At chance: a cross-entropy over k classes whose last 25% sits within ``CHANCE_BAND`` (3%)
of ln k is a plateau whatever came before: the model predicts the uniform distribution.
A loss that blew up and came back to chance "improved" from its early steps (Adam at lr
3 on a ResNet: 1.7, 3.6, then 1.4-1.6 against ln 4 = 1.39 for 90 steps;
benchmarks/accuracy.py, calibration split, resnet:lr_adam). Converged: a cross-entropy
whose whole run sits below ``CONVERGED`` (0.5) x ln k has learnt what it can and is not
stuck (fine-tuning a trained CNN at a tenth of its learning rate: 0.3-0.4 throughout
against ln 4; calibration split, cnn:healthy:finetune).

Noisy: a loss whose 95th-percentile excursion over its recent median exceeds ``NOISY``
(3x; ``_util.excursions``) measures no 2% gain, unless it sits at chance: an
actor-critic's loss, whose size follows the episodes' returns, not progress
(``../shared/real-programs`` actor_critic_cartpole_healthy: 7.9).
"""

from __future__ import annotations

import math
import statistics

from ._util import ce_classes, finite, fmt, loss_noise, loss_trend
from .finding import Evidence, Finding, Kind
from .history import History

MIN_STEPS = 100
MIN_GAIN = 0.02
CHANCE_BAND = 0.03
CONVERGED = 0.5
NOISY = 3.0


def check(h: History) -> list[Finding]:
    steps, values = finite(loss_trend(h)[0])
    if len(values) < MIN_STEPS:
        return []
    early = statistics.median(values[: max(5, len(values) // 10)])
    late = statistics.median(values[-max(5, len(values) // 4) :])
    k = ce_classes(h)
    at_chance = k is not None and abs(late - math.log(k)) <= CHANCE_BAND * math.log(k)
    if abs(early) < 1e-6 or (late > 1.5 * early and not at_chance):
        return []
    gain = (early - late) / abs(early)
    if gain >= MIN_GAIN and not at_chance:
        return []
    if k is not None and max(early, late) < CONVERGED * math.log(k):
        return []  # learnt, and holding there
    noise = loss_noise(h)
    if not at_chance and noise is not None and noise > NOISY:
        return []  # a loss this noisy measures no 2% gain
    return [
        Finding(
            kind=Kind.LOSS_PLATEAU,
            severity="warning",
            step=steps[-max(5, len(values) // 4)],
            layer=None,
            summary=(
                f"loss plateau: {fmt(early)} at the start, {fmt(late)} over the last "
                f"{len(values) // 4} steps ({gain:.1%} better in {len(values)} steps)"
            ),
            evidence=[
                Evidence("median loss, first 10% of steps", fmt(early)),
                Evidence("median loss, last 25% of steps", fmt(late)),
                Evidence("relative improvement", round(gain, 4)),
            ],
            details={"early_loss": early, "late_loss": late, "gain": gain}
            | ({"chance": math.log(k), "classes": k} if at_chance and k else {}),
        )
    ]
