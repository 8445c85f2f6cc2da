"""loss_unread: the loss was read on fewer than half of the steps, so it is not judged.

Needs: each objective's loss series and the steps counted for it (``detect.training``:
``Objective.counted``), and why the steps without a loss had none (``meta['loss_unread']``,
``collect/step/loss_reading.py``: no ``backward()`` in the step, a ``backward()`` of no loss
gradoc could read, or one that belonged to another run).

gradoc reads the loss every program hands to ``backward()``, whatever method computed it.
A program whose gradients come another way (``torch.func``, a hand-written backward) has
steps with no loss to read. Rule: the run's loss (its first objective's: another
optimizer's steps with no loss of their own share the last loss, so they are not counted)
read on fewer than ``COVERED`` (half, ``detect.training``) of its steps gets one warning,
and it is not judged at all:
no healthy curve, no blow-up, plateau or spike, no fix verified by it (``gradoc fix``). A loss
read on fewer than all its steps but at least half is judged, and the report says how many
(``report.json`` ``run.objectives[].loss_read``, the terminal, the HTML).
"""

from __future__ import annotations

from ..detect.finding import Evidence, Finding, Fix, Horizon, Hypothesis
from ..detect.history import History
from ..detect.training import COVERED
from .facts import Facts
from .kind import FindingKind


class LossUnread(FindingKind):
    """The loss was read on fewer than half of the steps: nothing is said of its trend."""

    name = "loss_unread"
    harm = (
        "Not the training's: a loss read on fewer than half its steps says nothing of the "
        "others, so no verdict about it is given (healthy, blow-up, plateau, a fix verified)."
    )

    def check(self, h: History) -> list[Finding]:
        found = []
        for o in h.objectives:
            if o.covered or not o.counted:
                continue
            read, counted = len(o.loss), o.counted
            seen = set(o.loss.steps)
            first = next((s for s in range(counted) if s not in seen), 0)
            why = unread_reasons(h) if o.id == 0 else []
            because = f" ({'; '.join(why)})" if why else ""
            name = f" of {o.name}" if len(h.objectives) > 1 else ""
            found.append(
                self.found(
                    severity="warning",
                    step=first,
                    summary=(
                        f"the loss{name} was read on {read} of its {counted} steps{because}: "
                        "its trend is not judged (fewer than half the steps say nothing of "
                        "the others)"
                    ),
                    symptom="the loss of most steps was not seen",
                    evidence=[
                        Evidence("steps whose loss was read", read),
                        Evidence("steps counted", counted),
                        Evidence("share needed to judge the loss", COVERED),
                    ],
                    fixes=[
                        Fix(
                            Horizon.IMMEDIATE,
                            "hand the loss to backward() (or torch.autograd.grad) each step, "
                            "or log it yourself and read it beside gradoc's report",
                        )
                    ],
                )
            )
        return found

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        return []


def unread_reasons(h: History) -> list[str]:
    """Why the first objective's steps had no loss read, with how many steps each."""
    return [f"{why}: {n} steps" for why, n in sorted(h.meta.loss_unread.items())]
