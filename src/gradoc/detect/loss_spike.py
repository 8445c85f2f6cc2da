"""loss_spike: the loss jumps far above its recent level for a moment, then comes back.

Needs: the per-step loss (per sample when it is a sum over samples; see
``_util.loss_trend``).

Rule: against the previous ``WINDOW`` (128) finite losses, a step is a spike when its
rolling z-score exceeds ``Z`` (6, as in OLMo-core) and it is at least 25% above the
window's median, or when it is at least ``RATIO`` (10) times the median of the last
``RECENT`` (16) losses (Megatron-LM's rule, against the recent level: a loss still falling
from 3.0 to 0.3 has a 128-step median twice its level, and a mislabelled batch at 4.3
was no spike against it; benchmarks/accuracy.py, calibration split, decoder:bad_batch).
A spike needs 10 earlier steps, and the loss must come back below twice the window's
median within ``RECOVER`` (50) steps; a loss that stays up is a divergence instead.
"""

from __future__ import annotations

import math
import statistics

from ._util import fmt, loss_trend
from .finding import Finding
from .history import History

WINDOW = 128
Z = 6.0
RATIO = 10.0
RECOVER = 50
MIN_HISTORY = 10
RECENT = 16


def check(h: History) -> list[Finding]:
    trend, _ = loss_trend(h)
    steps, values = trend.steps, trend.values
    spikes = []
    for i in range(MIN_HISTORY, len(values)):
        v = values[i]
        window = [x for x in values[max(0, i - WINDOW) : i] if math.isfinite(x)]
        if not math.isfinite(v) or len(window) < MIN_HISTORY:
            continue
        med = statistics.median(window)
        recent = statistics.median(window[-RECENT:])
        sd = statistics.pstdev(window)
        z = (v - statistics.fmean(window)) / sd if sd > 0 else math.inf
        if z > Z and v > 1.25 * med:
            pass
        elif recent > 0 and v >= RATIO * recent:
            med = recent
        else:
            continue
        after = [x for x in values[i + 1 : i + 1 + RECOVER]]
        if after and any(math.isfinite(x) and x < 2 * med for x in after):
            spikes.append((steps[i], v, med, z))
    if not spikes:
        return []
    step, value, med, z = spikes[0]
    grad = h.grad_norm.at(step)
    evidence: list[dict[str, object]] = [
        {"signal": "loss at the spike", "step": step, "value": fmt(value)},
        {"signal": "median loss of the previous 128 steps", "value": fmt(med)},
        {"signal": "rolling z-score", "value": fmt(z)},
    ]
    if grad is not None:
        evidence.append({"signal": "global gradient norm at the spike", "value": fmt(grad)})
    if len(spikes) > 1:
        evidence.append(
            {
                "signal": "spikes in the run",
                "value": len(spikes),
                "steps": [s[0] for s in spikes[:10]],
            }
        )
    details = {"spikes": len(spikes), "spike_steps": [s[0] for s in spikes[:10]]}
    return [
        Finding(
            kind="loss_spike",
            severity="warning",
            step=step,
            layer=None,
            summary=(
                f"loss spike at step {step}: {fmt(value)}, {fmt(value / med)}x the recent median"
                + (f" ({len(spikes)} spikes in the run)" if len(spikes) > 1 else "")
            ),
            evidence=evidence,
            details=details,
        )
    ]
