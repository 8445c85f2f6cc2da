"""saturated_units: sigmoid/tanh-family outputs stuck at their bounds, passing no gradient.

Needs: per-module saturated fraction (the share of outputs whose local derivative is
below 1% of its peak: tanh |x| > 2.99, sigmoid |x| > 5.99 in pre-activation terms).

Rule (DeepDiagnosis, ICSE'22: saturation when > 50% of pre-activations have |x| >= 5):
a layer is flagged when its saturated fraction exceeds ``SHARE`` (50%) on at least half of
its activation samples and on the last one. Our cut-off is the derivative one above
(stricter for sigmoid, looser for tanh than |x| >= 5); SageMaker Debugger's tanh ±9.5 and
sigmoid (-23, 17) flag only complete saturation.
"""

from __future__ import annotations

from .finding import Evidence, Finding, Kind
from .history import History

SHARE = 0.5


def check(h: History) -> list[Finding]:
    flagged = []
    for m in h.modules:
        sat = h.act(m.name, "sat_frac")
        if not sat.values:
            continue
        over = [s for s, v in zip(sat.steps, sat.values) if v > SHARE]
        if len(over) * 2 >= len(sat.values) and sat.values[-1] > SHARE:
            flagged.append((m.name, m.type, over[0], sat.values[-1]))
    if not flagged:
        return []
    name, mtype, first, share = flagged[0]
    others = [f[0] for f in flagged[1:]]
    return [
        Finding(
            kind=Kind.SATURATED_UNITS,
            severity="warning",
            step=first,
            layer=name,
            summary=(
                f"saturated units: {share:.0%} of the outputs of {name} ({mtype}) sit where "
                "the gradient is < 1% of its peak"
                + (f" (also {', '.join(others)})" if others else "")
            ),
            evidence=[
                Evidence(
                    f"saturated fraction of {n} ({t})", round(v, 3), step=s, type="distribution"
                )
                for n, t, s, v in flagged
            ],
        )
    ]
