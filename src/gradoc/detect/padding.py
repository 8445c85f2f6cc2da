"""length_anomaly, padding_leak, loss_includes_padding, padding_waste.

Needs: the run's ``length_anomaly`` events and ``meta['lengths']`` (recorded whenever the
model's batch lengths can be read, see ``collect/lengths.py``), and, with
``gradoc run --check padding``, the ``padding_audit`` events (``locate/padding.py``).

Rules: every audit finding is reported once, at the first step it was seen. A length
anomaly (its rule is in ``collect/lengths.py``) is info, and a warning when one falls on a
step with a non-finite value; the diagnosis then folds it into that story.
``padding_waste`` is info when more than a third of the tokens the model processed were
padding (above half it suggests bucketing): a cost, not a fault; when the pads were found
by the model's ``padding_idx`` with no mask argument, it says so and how to audit them.
"""

from __future__ import annotations

from ..store import EventKind
from ._util import fmt
from .finding import Evidence, Finding, Kind
from .history import History

WASTE_INFO = 1 / 3
_UNMASKED = (
    "; the pads reached the model with no mask argument (found by its embedding's "
    "padding_idx): unless the model masks them itself they change the real positions' "
    "outputs, which gradoc run --check padding audits"
)


def check(h: History) -> list[Finding]:
    findings: list[Finding] = []
    anomalies = [e for e in h.events if e.kind == EventKind.LENGTH_ANOMALY]
    if anomalies:
        first = anomalies[0]
        bad = {
            e.step
            for e in h.events
            if e.kind in (EventKind.NONFINITE_LOSS, EventKind.NONFINITE_GRAD)
        }
        bad |= {e.step for e in h.events if e.kind == EventKind.NONFINITE_ORIGIN}
        findings.append(
            Finding(
                kind=Kind.LENGTH_ANOMALY,
                # unusual lengths are news, a problem only where something broke with them
                severity="warning" if any(e.step in bad for e in anomalies) else "info",
                step=first.step,
                layer=None,
                summary=f"unusual sequence lengths: {first.message}"
                + (f" ({len(anomalies)} such batches)" if len(anomalies) > 1 else ""),
                evidence=[
                    Evidence(k, first.data[k])
                    for k in ("min", "previous_min", "max", "previous_max", "source")
                    if k in first.data
                ]
                + [Evidence("batches with unusual lengths", len(anomalies))],
            )
        )
    seen: set[tuple[str, str | None]] = set()
    for e in h.events:
        if e.kind != EventKind.PADDING_AUDIT:
            continue
        f = e.data["finding"]
        key = (f["kind"], f.get("layer"))
        if key in seen or f["kind"] == Kind.PADDING_WASTE:
            continue
        seen.add(key)
        findings.append(
            Finding(
                kind=f["kind"],
                severity=f["severity"],
                step=e.step,
                layer=f.get("layer"),
                summary=f["summary"],
                evidence=f.get("evidence", []),
                details=f.get("details") or {},
            )
        )
    lengths = h.meta.get("lengths") or {}
    ratio = lengths.get("padding_ratio")
    if ratio is not None and ratio > WASTE_INFO:
        findings.append(
            Finding(
                kind=Kind.PADDING_WASTE,
                severity="info",
                step=None,
                layer=None,
                summary=f"{ratio:.0%} of the tokens were padding over {lengths['batches']} "
                f"batches (mean length {fmt(lengths['mean'])} of up to {lengths['max']})"
                + ("; bucket batches by length" if ratio > 0.5 else "")
                + (_UNMASKED if str(lengths.get("source", "")).endswith("no mask") else ""),
                evidence=[
                    Evidence("padding ratio", ratio),
                    Evidence("mean length", lengths["mean"]),
                    Evidence("lengths from", lengths.get("source")),
                ],
            )
        )
    return findings
