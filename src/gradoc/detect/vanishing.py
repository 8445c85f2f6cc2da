"""vanishing_gradients: the input-side layers get almost no gradient.

Needs: per-parameter gradient norms.

Rule (AUTOTRAINER, ICSE'21): with the weight matrices in forward order, the ratio of the
first layer's gradient norm to the last layer's is below ``RATIO`` (1e-3) and the first
layer's norm is below ``FIRST_NORM`` (1e-4), on at least half of the recorded steps and
on the last one (a transient dip is not a diagnosis). SageMaker Debugger's rule (mean
|gradient| < 1e-7) is reported as evidence: the first layer's RMS gradient.

Calibration: a 12-layer sigmoid MLP gives a ratio of ~1e-9; healthy runs stay above 0.05
(a transformer's embedding vs its head: ~0.1). At least 3 weight matrices are needed.
"""

from __future__ import annotations

import math

from ._util import fmt, weight_params
from .finding import Evidence, Finding, Kind
from .history import History

RATIO = 1e-3
FIRST_NORM = 1e-4
MIN_LAYERS = 3


def check(h: History) -> list[Finding]:
    ws = weight_params(h)
    if len(ws) < MIN_LAYERS:
        return []
    first, last = ws[0], ws[-1]
    g_first, g_last = h.param(first.name, "grad_norm"), h.param(last.name, "grad_norm")
    last_by_step = dict(zip(g_last.steps, g_last.values))
    flagged: list[int] = []
    ratios: list[float] = []
    checked = 0
    for s, gf in zip(g_first.steps, g_first.values):
        gl = last_by_step.get(s)
        if gl is None or not (math.isfinite(gf) and math.isfinite(gl)) or gl <= 0:
            continue
        checked += 1
        if gf / gl < RATIO and gf < FIRST_NORM:
            flagged.append(s)
            ratios.append(gf / gl)
    if not checked or len(flagged) * 2 < checked or flagged[-1] != g_first.steps[-1]:
        return []
    numel = math.prod(first.shape or (1,))
    rms = g_first.at(flagged[-1]) or 0.0
    return [
        Finding(
            kind=Kind.VANISHING_GRADIENTS,
            severity="warning",
            step=flagged[0],
            layer=first.module,
            summary=(
                f"vanishing gradients: {first.name} gets {fmt(ratios[-1])}x the gradient of "
                f"{last.name} ({len(flagged)} of {checked} steps)"
            ),
            evidence=[
                Evidence(f"grad norm {first.name} / grad norm {last.name}", fmt(ratios[-1])),
                Evidence(f"grad norm of {first.name}", fmt(g_first.values[-1])),
                Evidence(f"RMS gradient of {first.name}", fmt(rms / math.sqrt(numel))),
                Evidence("steps with the ratio below 1e-3", len(flagged), extra={"of": checked}),
            ],
        )
    ]
