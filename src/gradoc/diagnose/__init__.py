"""diagnose: turn findings into the diagnosis a senior engineer would write.

1. Stories (``stories.py``): findings that are one story become one, on the run's
   timeline, headlined by the first link of the causal chain.
2. Order: stories most important first (errors, then warnings, then information; an
   earlier onset first), so the first warning or error is the headline.
3. Explain: each finding kind's class (``gradoc.findings``) gives its symptom, the
   hypotheses it considers, each with the signs it predicts checked against the run (seen,
   contradicted, not observed), fixes by horizon, monitoring to add, and the common wrong
   diagnoses ruled out with the run's numbers. Hypotheses are ranked by one rule
   (``gradoc.detect.finding``): the evidence, never the order they are written in.
"""

from __future__ import annotations

from ..detect.finding import HORIZONS, Finding, Hypothesis, Related, State, rank
from ..detect.history import History
from ..findings import REGISTRY
from ..findings.advice import zero_init
from ..findings.facts import Facts, gather
from .stories import causes, merge, order


def diagnose(history: History, findings: list[Finding]) -> list[Finding]:
    """Merge related findings into stories, order them, explain each. A finding told on its
    own though it belongs to another's story (a NaN to the end of the run after a blow-up)
    says what it is, and takes its cause, fixes and ruled-out causes from its story's head:
    one cause per story."""
    heads: dict[int, Finding] = {}
    stories = order(merge(findings, heads))
    first = min((f.step for f in findings if f.step is not None), default=None)
    facts = gather(history, first)
    for f in stories:
        explain(f, history, facts)
    for f in stories:
        head = heads.get(id(f))
        if head is not None:
            f.hypotheses, f.ruled_out, f.fixes = [], list(head.ruled_out), list(head.fixes)
            f.root_cause_family = head.root_cause_family
            f.root_cause = f"the cause of {head.kind} at step {head.step}: {head.root_cause}"
            f.related.insert(0, Related(head.kind, head.step, head.layer, head.summary))
    return stories


def explain(f: Finding, h: History, facts: Facts) -> None:
    """Fill in the diagnosis of one finding, in place."""
    kind = REGISTRY[f.kind]
    made = kind.explain(f, h, facts)
    if kind.considers_zero_init and (zero := zero_init(facts)) is not None:
        made.append(zero)
    f.fixes.sort(key=lambda x: HORIZONS.index(x.horizon))  # stable: in order of likelihood
    f.hypotheses = rank(made)
    if not f.hypotheses:
        return
    top = f.hypotheses[0]
    f.root_cause_family = top.family
    f.root_cause = root_cause(top)
    if not top.confirmed:
        f.root_cause += (
            " (not confirmed: no sign of it, or of another cause, was seen in this run; "
            "the most common cause of this symptom)"
        )


def root_cause(top: Hypothesis) -> str:
    """The root cause in one sentence: the cause, and the one sign seen that tells most
    (the heaviest; the first of equals). The other signs stay under the hypothesis: the
    terminal shows them there, not again on the root cause's line."""
    seen = [s for s in top.signs if s.state is State.SEEN]
    decisive = max(seen, key=lambda s: s.weight, default=None)  # max keeps the first
    return top.cause + (f" ({decisive.claim})" if decisive is not None else "")


__all__ = ["causes", "diagnose", "explain", "merge", "order", "root_cause"]
