"""Stories: findings that are one story become one, on the run's timeline.

A finding is folded into (explained by) another only if that one could cause it (each
diagnosis module's ``CAUSED_BY``, as data) and began at or before it: a consequence is
never blamed on something that came later. A NaN/Inf born in the user's own code (located
in a forward or backward pass, or in the input data) is a root cause in itself: never
folded into another finding, and the divergence, plateau, spikes or odd updates that
follow it are its consequences. Chains are followed to their first link: a learning rate
that blows the loss up, which kills units, which leaves the loss on a plateau at chance,
is one story headlined by the blow-up. A standing condition (an Adam learning rate as
large as the weights) is a setting rather than an event: it joins the story of what it
caused, whenever that began.
"""

from __future__ import annotations

from ..detect.finding import Finding, Kind
from .registry import REGISTRY

CAUSES: dict[Kind, tuple[Kind, ...]] = {k: m.CAUSED_BY for k, m in REGISTRY.items()}
"""consequence kind -> the kinds that can cause it, strongest first (order breaks ties)"""

_SEVERITY = {"error": 0, "warning": 1, "info": 2}


def born_in_user_code(f: Finding) -> bool:
    """A NaN/Inf whose birth was located in the user's forward, backward or data, and not
    an overflow of values that were already blowing up (``details["grew_before"]``)."""
    origin = f.origin or {}
    if f.kind != Kind.NONFINITE or not origin or f.details.get("grew_before"):
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
    # gradients never cleared: the running sum is what grows, explodes, blows the loss up
    Kind.ACCUMULATING_GRADIENTS,
    # most of the model never trains: what does not improve follows from it
    Kind.FROZEN_PARAMETERS,
    Kind.EXPLODING_GRADIENTS,
    Kind.LOSS_BLOWUP,
    Kind.VANISHING_GRADIENTS,
    Kind.LOSS_DIVERGENCE,
    Kind.DEAD_UNITS,
    Kind.SATURATED_UNITS,
    Kind.LARGE_UPDATES,
    "nonfinite_update",  # a NaN/Inf the updates wrote (not born in the user's code)
    Kind.POOR_INITIALIZATION,
    Kind.TINY_UPDATES,
    Kind.LOSS_SPIKE,
    Kind.LOSS_PLATEAU,
    Kind.LENGTH_ANOMALY,
)


def _onset(f: Finding) -> float:
    return f.step if f.step is not None else float("inf")


def standing(f: Finding) -> bool:
    """A setting rather than an event: it joins the story of what it caused."""
    return f.kind == Kind.LARGE_UPDATES and f.details.get("rule") == "adam_lr"


def _when(f: Finding) -> tuple[float, int]:
    """A total order of findings on the timeline (acyclic stories); a standing condition
    comes last, so that what it caused can take it in."""
    if standing(f):
        return (float("inf"), len(FIRST_LINKS))
    kind: str = f.kind
    if f.kind == Kind.NONFINITE and not born_in_user_code(f):
        kind = "nonfinite_update"
    if f.kind == Kind.POOR_INITIALIZATION and f.details.get("rule") == "chance":
        kind = "poor_initialization_chance"
    rank = FIRST_LINKS.index(kind) if kind in FIRST_LINKS else len(FIRST_LINKS)
    return (_onset(f), rank)


def _explains(cause: Finding, f: Finding) -> bool:
    """``cause`` can explain ``f``: a possible cause that began before it (or with it)."""
    if born_in_user_code(f):
        return False  # a root cause in itself
    if cause.kind not in CAUSES.get(f.kind, ()):
        return False
    if cause.kind == Kind.NONFINITE and not born_in_user_code(cause):
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
            {"kind": str(f.kind), "step": f.step, "layer": f.layer, "summary": f.summary}
        )
        target.related.extend(f.related)
        if f.origin is not None and target.origin is None:
            target.origin = f.origin  # where the NaN was born travels with the story
        if f.severity == "error":
            target.severity = "error"
        elif f.severity == "warning" and target.severity == "info":
            target.severity = "warning"  # what it caused is a problem: so is it
    return kept


def order(stories: list[Finding]) -> list[Finding]:
    """Most important first: errors, warnings, information; then the earlier onset."""
    return sorted(stories, key=lambda f: (_SEVERITY[f.severity], _onset(f), -len(f.related)))
