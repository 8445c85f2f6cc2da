"""log_incomplete: the run log stopped recording before the run ended (a full disk).

Needs: what the run knew in memory when its log stopped (the steps it took, the error that
stopped the writer), which ``gradoc.analysis.analyze`` hands over as ``stopped``.

Rule: whenever the writer stopped before the run did, one warning at the last step the log
holds, saying how many of the run's steps were not watched. Not a training problem: its fix
comes with it, and there is no cause to weigh.
"""

from __future__ import annotations

from ..detect.finding import Evidence, Finding, Fix, Horizon, Hypothesis
from ..detect.history import History
from ..store import Stopped
from .facts import Facts
from .kind import FindingKind


class LogIncomplete(FindingKind):
    """The run log stopped recording before the run ended: what gradoc reports covers only
    the steps before it stopped."""

    name = "log_incomplete"
    harm = (
        "The log stopped before the run did: what the report says covers only the steps it holds."
    )

    def stopped(self, recorded: int, stopped: Stopped) -> Finding:
        """The steps the run took that its log does not hold (``recorded`` of them kept)."""
        steps = stopped.steps
        return self.found(
            severity="warning",
            step=recorded,
            summary=f"the run log stopped recording at step {recorded} ({stopped.error}): "
            f"{max(0, steps - recorded)} of the run's {steps} steps were not watched",
            symptom="what gradoc reports covers only the steps before the log stopped",
            evidence=[
                Evidence("steps the run took", steps),
                Evidence("steps in the run log", recorded),
            ],
            fixes=[
                Fix(
                    Horizon.IMMEDIATE,
                    "free space where the run directory is, or give it another place (--out), "
                    "and run again to watch every step",
                )
            ],
        )

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        return []
