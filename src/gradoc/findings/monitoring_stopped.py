"""monitoring_stopped: gradoc failed inside the program and stopped watching it there.

Needs: the run log's ``internal_error`` events, which every entry point of gradoc records
when it fails (``_util/entry.py``: a hook, a wrapped function, a handler, with the
traceback), at the step the run had reached.

Rule: whenever one was recorded, one warning at its step: what the report says covers the
steps before it, and the program went on unwatched (nothing of gradoc's reached it). Not a
training problem: there is no cause to weigh, and the fix is gradoc's (the traceback, for a
bug report). A run that gradoc stopped watching is never called healthy.
"""

from __future__ import annotations

from ..detect.finding import Evidence, Finding, Fix, Horizon, Hypothesis
from ..detect.history import History
from ..store import EventKind
from .facts import Facts
from .kind import FindingKind


class MonitoringStopped(FindingKind):
    """gradoc failed inside the program and stopped watching it: the report covers the steps
    before that; the program went on as it would have without gradoc."""

    name = "monitoring_stopped"
    harm = (
        "Not the training's: gradoc stopped watching after an internal error of its own, so "
        "the steps after it were not seen."
    )

    def check(self, h: History) -> list[Finding]:
        failed = [e for e in h.events if e.kind == EventKind.INTERNAL_ERROR]
        if not failed:
            return []
        first = failed[0]
        step = first.step if first.step is not None else 0
        return [
            self.found(
                severity="warning",
                step=step,
                summary=(
                    f"gradoc stopped watching at step {step} after an {first.message}; the "
                    "program went on unwatched: what this report says covers only the steps "
                    "before it"
                ),
                symptom="the steps after the error were not watched",
                evidence=[
                    Evidence("steps watched", h.meta.steps if h.meta.steps is not None else step),
                    Evidence("internal errors recorded", len(failed)),
                ],
                fixes=[
                    Fix(
                        Horizon.IMMEDIATE,
                        'report it to gradoc with the traceback (sqlite3 run.db "select data '
                        "from events where kind = 'internal_error'\"), and run again to watch "
                        "every step",
                    )
                ],
            )
        ]

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        return []
