"""diagnose: turn findings into the diagnosis a senior engineer would write.

1. Stories: findings that are one story become one, on the run's timeline. A finding is
   folded into (explained by) another only if that one could cause it (``CAUSES``, as
   data) and began at or before it: a consequence is never blamed on something that
   came later. A NaN/Inf born in the user's own code (located in a forward or backward
   pass, or in the input data) is a root cause in itself: never folded into another
   finding, and the divergence, plateau, spikes or odd updates that follow it are its
   consequences. Chains are followed to their first link: a learning rate that blows the
   loss up, which kills units, which leaves the loss on a plateau at chance, is one
   story headlined by the blow-up.
2. Order: stories most important first (errors, then warnings, then information; an
   earlier onset first), so the first warning or error is the headline.
3. Explain: each story gets a symptom, ranked hypotheses with the run's evidence for and
   against and a check for each, a root cause, fixes by horizon, monitoring to add, and
   the common wrong diagnoses ruled out with the run's numbers.
"""

from __future__ import annotations

from ..detect.finding import Finding
from ..detect.history import History
from .facts import gather
from .playbook import explain

# consequence kind -> the kinds that can cause it, strongest first (order breaks ties)
CAUSES: dict[str, tuple[str, ...]] = {
    "nonfinite": ("exploding_gradients", "loss_blowup", "loss_divergence", "large_updates"),
    "loss_divergence": ("nonfinite", "loss_blowup", "exploding_gradients"),
    "loss_blowup": ("nonfinite", "exploding_gradients", "loss_divergence"),
    "exploding_gradients": ("loss_blowup", "poor_initialization"),
    "large_updates": ("nonfinite", "loss_blowup", "exploding_gradients", "loss_divergence"),
    "saturated_units": (
        "loss_blowup",
        "loss_divergence",
        "exploding_gradients",
        "poor_initialization",
    ),
    "dead_units": ("loss_blowup", "exploding_gradients", "loss_divergence"),
    "poor_initialization": ("exploding_gradients", "vanishing_gradients"),
    "tiny_updates": ("nonfinite", "vanishing_gradients", "dead_units"),
    "vanishing_gradients": ("dead_units", "saturated_units", "loss_blowup", "loss_divergence"),
    "loss_plateau": (
        "nonfinite",
        "loss_blowup",
        "dead_units",
        "vanishing_gradients",
        "saturated_units",
        "tiny_updates",
        "loss_divergence",
    ),
    "loss_spike": ("nonfinite", "loss_blowup"),
    # a batch of unusual lengths that coincides with a NaN is that NaN's trigger: one story
    "length_anomaly": ("nonfinite",),
}

_SEVERITY = {"error": 0, "warning": 1, "info": 2}


def born_in_user_code(f: Finding) -> bool:
    """A NaN/Inf whose birth was located in the user's forward, backward or data, and not
    an overflow of values that were already blowing up (``details["grew_before"]``)."""
    origin = f.origin or {}
    if f.kind != "nonfinite" or not origin or f.details.get("grew_before"):
        return False
    return origin.get("phase") == "input" or (
        origin.get("phase") in ("forward", "backward") and bool(origin.get("op"))
    )


# when two findings begin at the same step, the one earlier here is the first link
FIRST_LINKS = (
    # a loss at step 0 far above its chance level: logits too large at initialisation,
    # which is what makes the first gradients explode (nanoGPT with init std 1.0: loss 35
    # against ln 65 = 4.2, gradient norm 2,200 before the program's clip)
    "poor_initialization_chance",
    "nonfinite",
    "exploding_gradients",
    "loss_blowup",
    "vanishing_gradients",
    "loss_divergence",
    "dead_units",
    "saturated_units",
    "large_updates",
    "nonfinite_update",  # a NaN/Inf the updates wrote (not born in the user's code)
    "poor_initialization",
    "tiny_updates",
    "loss_spike",
    "loss_plateau",
    "length_anomaly",
)


def _onset(f: Finding) -> float:
    return f.step if f.step is not None else float("inf")


def _standing(f: Finding) -> bool:
    """A setting rather than an event (an Adam learning rate that allows steps as large as
    the weights): it joins the story of what it caused, whenever that began."""
    return f.kind == "large_updates" and f.details.get("rule") == "adam_lr"


def _when(f: Finding) -> tuple[float, int]:
    """A total order of findings on the timeline (acyclic stories); a standing condition
    comes last, so that what it caused can take it in."""
    if _standing(f):
        return (float("inf"), len(FIRST_LINKS))
    kind = "nonfinite_update" if f.kind == "nonfinite" and not born_in_user_code(f) else f.kind
    if f.kind == "poor_initialization" and f.details.get("rule") == "chance":
        kind = "poor_initialization_chance"
    rank = FIRST_LINKS.index(kind) if kind in FIRST_LINKS else len(FIRST_LINKS)
    return (_onset(f), rank)


def _explains(cause: Finding, f: Finding) -> bool:
    """``cause`` can explain ``f``: a possible cause that began before it (or with it)."""
    if born_in_user_code(f):
        return False  # a root cause in itself
    if cause.kind not in CAUSES.get(f.kind, ()):
        return False
    if cause.kind == "nonfinite" and not born_in_user_code(cause):
        return False  # a NaN from the updates is itself a consequence, not a first link
    return _when(cause) < _when(f)


def merge(findings: list[Finding]) -> list[Finding]:
    """Fold each consequence into the first link of its story (see the module docstring)."""
    timeline = sorted(findings, key=_when)
    root: dict[int, Finding] = {}
    kept = []
    for i, f in enumerate(timeline):
        order_ = CAUSES.get(f.kind, ())
        causes = [c for c in timeline[:i] if _explains(c, f)]
        if not causes:
            root[id(f)] = f
            kept.append(f)
            continue
        cause = min(causes, key=lambda c: (order_.index(c.kind), _when(c)))
        target = root[id(cause)]
        root[id(f)] = target
        target.related.append(
            {"kind": f.kind, "step": f.step, "layer": f.layer, "summary": f.summary}
        )
        target.related.extend(f.related)
        if f.origin is not None and target.origin is None:
            target.origin = f.origin  # where the NaN was born travels with the story
        if f.severity == "error":
            target.severity = "error"
    return kept


def order(stories: list[Finding]) -> list[Finding]:
    """Most important first: errors, warnings, information; then the earlier onset."""
    return sorted(stories, key=lambda f: (_SEVERITY[f.severity], _onset(f), -len(f.related)))


def diagnose(history: History, findings: list[Finding]) -> list[Finding]:
    """Merge related findings into stories, order them, explain each."""
    stories = order(merge(findings))
    first = min((f.step for f in findings if f.step is not None), default=None)
    facts = gather(history, first)
    for f in stories:
        explain(f, history, facts)
    return stories


__all__ = ["CAUSES", "FIRST_LINKS", "born_in_user_code", "diagnose", "merge", "order"]
