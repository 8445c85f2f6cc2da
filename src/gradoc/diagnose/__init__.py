"""diagnose: turn findings into the diagnosis a senior engineer would write.

1. Stories (``stories.py``): findings that are one story become one, on the run's
   timeline, headlined by the first link of the causal chain.
2. Order: stories most important first (errors, then warnings, then information; an
   earlier onset first), so the first warning or error is the headline.
3. Explain (``registry.py``): each finding kind has its own module, mirroring
   ``detect/``: its symptom, the hypotheses it considers, each with the signs it predicts
   checked against the run (seen, contradicted, not observed), the kinds that can cause
   it, fixes by horizon, monitoring to add, and the common wrong diagnoses ruled out with
   the run's numbers. Hypotheses are ranked by one rule (``gradoc.detect.finding``): the
   evidence, never the order they are written in.
"""

from __future__ import annotations

from ..detect.finding import Finding
from ..detect.history import History
from .facts import gather
from .registry import REGISTRY, explain
from .stories import CAUSES, FIRST_LINKS, born_in_user_code, merge, order


def diagnose(history: History, findings: list[Finding]) -> list[Finding]:
    """Merge related findings into stories, order them, explain each."""
    stories = order(merge(findings))
    first = min((f.step for f in findings if f.step is not None), default=None)
    facts = gather(history, first)
    for f in stories:
        explain(f, history, facts)
    return stories


__all__ = [
    "CAUSES",
    "FIRST_LINKS",
    "REGISTRY",
    "born_in_user_code",
    "diagnose",
    "explain",
    "merge",
    "order",
]
