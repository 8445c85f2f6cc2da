"""Stories: findings that are one story become one, on the run's timeline.

A finding is folded into (explained by) another only if that one could cause it (each kind's
``caused_by``, as data), began at or before it, and was not over long before it began
(``LINGER`` steps after a loss that came back): a consequence is never blamed on something
that came later, nor on a transient that had ended. A NaN/Inf born in the user's own code
(located in a forward or backward pass, or in the input data) is a root cause in itself:
never folded into another finding, and the divergence, plateau, spikes or odd updates that
follow it are its consequences. Chains are followed to their first link: a learning rate
that blows the loss up, which kills units, which leaves the loss on a plateau at chance, is
one story headlined by the blow-up. A finding about what the program set up (a mode, a sign,
a loss's input, a clip threshold: each kind's ``setup``) was there from the first step, whatever
step its rule saw it at, and heads the story of what it caused. A standing condition (an Adam
learning rate as large as the weights) is a setting rather than an event: it joins the story
of what it caused, whenever that began. A finding its kind tells on its own (``told``: a loss
NaN to the end of the run) joins its story and stays a finding: how the run ended is said,
whatever heads the story.
"""

from __future__ import annotations

from ..detect.finding import SEVERITY_ORDER, Finding, Related
from ..findings import REGISTRY, FindingKind
from ..findings.kind import LAST_LINK


def causes(kind: str) -> tuple[str, ...]:
    """The kinds that can cause ``kind``, strongest first (its class's ``caused_by``)."""
    found = REGISTRY.get(kind)
    return found.caused_by if found is not None else ()


def _kind(f: Finding) -> FindingKind | None:
    return REGISTRY.get(f.kind)


def _onset(f: Finding) -> float:
    return f.step if f.step is not None else float("inf")


def standing(f: Finding) -> bool:
    """A setting rather than an event: it joins the story of what it caused."""
    kind = _kind(f)
    return kind is not None and kind.standing(f)


def _when(f: Finding) -> tuple[float, int]:
    """A total order of findings on the timeline (acyclic stories): the onset, then, at the
    same step, the first link of the chain (each kind's ``rank``); a standing condition
    comes last, so that what it caused can take it in."""
    kind = _kind(f)
    if kind is None:
        return (_onset(f), LAST_LINK)
    if kind.standing(f):
        return (float("inf"), LAST_LINK)
    if kind.setup:  # there from the first step: the first link of what it caused
        return (-1.0, kind.rank(f))
    return (_onset(f), kind.rank(f))


def _explains(cause: Finding, f: Finding) -> bool:
    """``cause`` can explain ``f``: a possible cause that began before it (or with it)."""
    kind, by = _kind(f), _kind(cause)
    if kind is None or by is None or kind.root(f):
        return False  # a root cause in itself
    if cause.kind not in kind.caused_by or not by.can_cause(cause):
        return False
    return _when(cause) < _when(f) and _near(cause, by, f, kind)


LINGER = 100
"""Steps after a problem was over within which what began may still be its consequence
(a unit that died in a blow-up is seen dead at the next activation sample)."""


def _near(cause: Finding, by: FindingKind, f: Finding, kind: FindingKind) -> bool:
    """``f`` may have begun before ``cause`` was over, or soon after: a NaN thousands of
    steps after a loss that came back is not that blow-up's (a mechanism links them only
    while it lasts)."""
    over = by.until(cause)
    if over is None:
        return True
    began = kind.earliest(f)
    return began is None or began <= over + LINGER


def merge(findings: list[Finding], heads: dict[int, Finding] | None = None) -> list[Finding]:
    """Fold each consequence into the first link of its story (see the module docstring);
    ``heads``: filled with id(a finding told on its own) -> the head of its story."""
    timeline = sorted(findings, key=_when)
    root: dict[int, Finding] = {}
    kept = []
    for i, f in enumerate(timeline):
        order_ = causes(f.kind)
        found = [c for c in timeline[:i] if _explains(c, f)]
        if not found:
            root[id(f)] = f
            kept.append(f)
            continue
        cause = min(found, key=lambda c: (order_.index(c.kind), _when(c)))
        target = root[id(cause)]
        root[id(f)] = target
        target.related.append(Related(f.kind, f.step, f.layer, f.summary))
        kind = _kind(f)
        if kind is not None and kind.told(f):  # part of the story, and told on its own too
            kept.append(f)
            if heads is not None:
                heads[id(f)] = target
            continue
        target.related.extend(f.related)
        if f.origin is not None and target.origin is None:
            target.origin = f.origin  # where the NaN was born travels with the story
        if f.severity == "error":
            target.severity = "error"
        elif f.severity == "warning" and target.severity == "info":
            target.severity = "warning"  # what it caused is a problem: so is it
    return kept


def order(stories: list[Finding]) -> list[Finding]:
    """Most important first: errors, warnings, information; then what lasted to the end of
    the run before what was over (a NaN that ended the run heads a blow-up that came back
    long before it); then the earlier onset."""
    return sorted(
        stories,
        key=lambda f: (SEVERITY_ORDER[f.severity], _over(f), _onset(f), -len(f.related)),
    )


def _over(f: Finding) -> bool:
    kind = _kind(f)
    return kind is not None and kind.until(f) is not None
