"""length_anomaly: a batch arrived with sequence lengths outside the range seen before."""

from __future__ import annotations

from ..detect.finding import MODERATE, Family, Finding, Fix, Horizon, Hypothesis, Kind
from ..detect.history import History
from .facts import Facts

KIND = Kind.LENGTH_ANOMALY
CAUSED_BY = (Kind.NONFINITE,)
"""A batch of unusual lengths that coincides with a NaN is that NaN's trigger: one story."""
CONSIDERS_ZERO_INIT = False


def explain(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = "a batch arrived with sequence lengths outside the range seen before"
    edge = Hypothesis(
        Family.NUMERICS,
        "edge-case lengths (1 or 2 tokens, or very long) the model's code was never run on",
        "run gradoc.testing.check_numerics(model, example) on lengths 1 and 2",
        base=0.3,
    )
    edge.seen(f.summary, MODERATE, step=f.step)
    f.fixes += [
        Fix(Horizon.IMMEDIATE, "test the model on the edge lengths (gradoc.testing.assert_finite)"),
        Fix(
            Horizon.SHORT_TERM,
            "validate lengths in the data pipeline (filter or pad very short samples)",
        ),
    ]
    f.monitoring.append("min and max sequence length per batch (gradoc records them)")
    return [edge]
