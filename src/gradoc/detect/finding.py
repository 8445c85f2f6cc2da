"""A finding: one problem the run log shows, in the shape of report.json."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Severity = Literal["error", "warning", "info"]


@dataclass(kw_only=True, slots=True)
class Finding:
    kind: str
    """One of DESIGN.md's finding kinds, e.g. ``nonfinite``."""
    severity: Severity
    step: int | None
    """The first step at which the problem was seen."""
    layer: str | None
    """The module's fully qualified name (``''`` is the model itself), if one is involved."""
    summary: str
    evidence: list[dict[str, Any]] = field(default_factory=list)
    """The signals, each ``{"signal", "value", ...}`` with the observed value."""
    hypotheses: list[dict[str, Any]] = field(default_factory=list)
    """Ranked causes: ``{"cause", "likelihood", "support", "against", "check"}``."""
    ruled_out: list[dict[str, Any]] = field(default_factory=list)
    """Common wrong diagnoses, each ``{"cause", "why"}`` with the run's own numbers."""
    fixes: list[dict[str, Any]] = field(default_factory=list)
    """``{"horizon": "immediate" | "short-term" | "long-term", "action"}``."""
    origin: dict[str, Any] | None = None
    symptom: str | None = None
    """What a person sees, in one sentence."""
    root_cause: str | None = None
    root_cause_family: str | None = None
    """The kind of root cause, one of ``gradoc.diagnose.playbook.FAMILIES``
    (``"learning_rate"``, ``"numerics"``, ...): stable where ``root_cause``'s words are not."""
    monitoring: list[str] = field(default_factory=list)
    related: list[dict[str, Any]] = field(default_factory=list)
    """Findings folded into this one as its consequences or causes: kind, step, summary."""
    details: dict[str, Any] = field(default_factory=dict)
    """Typed facts the diagnosis reasons with (``{"spikes": 3}``, ``{"peak_loss": 1e5}``):
    rewording a summary or a signal can never change a diagnosis."""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if data["origin"] is None:
            del data["origin"]
        return data
