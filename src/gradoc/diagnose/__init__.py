"""diagnose: turn findings into the diagnosis a senior engineer would write.

1. Merge: findings that are one story become one (gradients that explode and then turn
   NaN are one problem; the NaN is its consequence). ``STORIES`` is that knowledge, as data.
2. Explain: each remaining finding gets a symptom, ranked hypotheses with the run's
   evidence for and against and a check for each, a root cause, fixes by horizon,
   monitoring to add, and the common wrong diagnoses ruled out with the run's numbers.
"""

from __future__ import annotations

from ..detect.finding import Finding
from ..detect.history import History
from .facts import gather
from .playbook import explain

# consequence kind -> the kinds that explain it, strongest first (an acyclic graph)
STORIES: dict[str, tuple[str, ...]] = {
    "nonfinite": ("exploding_gradients", "loss_divergence", "large_updates"),
    "loss_divergence": ("exploding_gradients",),
    "large_updates": ("exploding_gradients", "loss_divergence"),
    "saturated_units": ("loss_divergence", "exploding_gradients", "poor_initialization"),
    "poor_initialization": ("exploding_gradients", "vanishing_gradients"),
    "tiny_updates": ("vanishing_gradients", "dead_units"),
    "loss_plateau": ("dead_units", "vanishing_gradients", "saturated_units", "tiny_updates"),
    "vanishing_gradients": ("dead_units",),
    # a batch of unusual lengths that coincides with a NaN is that NaN's trigger: one story
    "length_anomaly": ("nonfinite",),
}


def merge(findings: list[Finding]) -> list[Finding]:
    """Fold each consequence into the finding that explains it (transitively)."""
    by_kind = {f.kind: f for f in findings}

    def host(kind: str, seen: frozenset[str] = frozenset()) -> Finding | None:
        for cause in STORIES.get(kind, ()):
            if cause in by_kind and cause not in seen:
                return host(cause, seen | {kind}) or by_kind[cause]
        return None

    kept = []
    for f in findings:
        target = host(f.kind)
        if target is None:
            kept.append(f)
            continue
        target.related.append(
            {"kind": f.kind, "step": f.step, "layer": f.layer, "summary": f.summary}
        )
        target.related.extend(f.related)
        if f.origin is not None and target.origin is None:
            target.origin = f.origin  # where the NaN was born travels with the story
        if f.severity == "error":
            target.severity = "error"
    return kept


def diagnose(history: History, findings: list[Finding]) -> list[Finding]:
    """Merge related findings and explain each story."""
    stories = merge(findings)
    first = min((f.step for f in findings if f.step is not None), default=None)
    facts = gather(history, first)
    for f in stories:
        explain(f, history, facts)
    return stories


__all__ = ["STORIES", "diagnose", "merge"]
