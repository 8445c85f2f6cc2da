"""length_anomaly: a batch arrived with sequence lengths outside the range seen before.

Needs: the run's ``length_anomaly`` events, recorded whenever the model's batch lengths can
be read (``collect/probes/lengths.py``, which holds the rule for an unusual batch).

Rule: reported once, at the first such batch, with the number of them. Unusual lengths are
news, and a problem only where something broke with them: info, and a warning when one
falls on a step with a non-finite value; the diagnosis then folds it into that story.
"""

from __future__ import annotations

from ..detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, Weight
from ..detect.history import History
from ..store import EventKind
from .facts import Facts
from .kind import FindingKind

NONFINITE_EVENTS = (EventKind.NONFINITE_LOSS, EventKind.NONFINITE_GRAD, EventKind.NONFINITE_ORIGIN)


"""A batch of unusual lengths that coincides with a NaN is that NaN's trigger: one story."""


class LengthAnomaly(FindingKind):
    """A batch arrived with sequence lengths outside the range seen before."""

    name = "length_anomaly"
    harm = (
        "Unusual lengths are news, not harm: a warning only where a batch of them coincides with "
        "a non-finite value."
    )
    caused_by = ("nonfinite",)
    link = 160

    def check(self, h: History) -> list[Finding]:
        anomalies = [e for e in h.events if e.kind == EventKind.LENGTH_ANOMALY]
        if not anomalies:
            return []
        first = anomalies[0]
        bad = {e.step for e in h.events if e.kind in NONFINITE_EVENTS}
        return [
            self.found(
                # unusual lengths are news, a problem only where something broke with them
                severity="warning" if any(e.step in bad for e in anomalies) else "info",
                step=first.step,
                summary=f"unusual sequence lengths: {first.message}"
                + (f" ({len(anomalies)} such batches)" if len(anomalies) > 1 else ""),
                evidence=[
                    Evidence(k, first.data[k])
                    for k in ("min", "previous_min", "max", "previous_max", "source")
                    if k in first.data
                ]
                + [Evidence("batches with unusual lengths", len(anomalies))],
            )
        ]

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        f.symptom = "a batch arrived with sequence lengths outside the range seen before"
        edge = Hypothesis(
            Family.NUMERICS,
            "edge-case lengths (1 or 2 tokens, or very long) the model's code was never run on",
            "run gradoc.testing.check_numerics(model, example) on lengths 1 and 2",
            base=0.3,
        )
        edge.seen(f.summary, Weight.MODERATE, step=f.step)
        f.fixes += [
            Fix(
                Horizon.IMMEDIATE,
                "test the model on the edge lengths (gradoc.testing.assert_finite)",
            ),
            Fix(
                Horizon.SHORT_TERM,
                "validate lengths in the data pipeline (filter or pad very short samples)",
            ),
        ]
        f.monitoring.append("min and max sequence length per batch (gradoc records them)")
        return [edge]
