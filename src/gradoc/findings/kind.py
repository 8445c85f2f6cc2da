"""A finding kind: one class in one module, holding everything gradoc knows about it.

A kind's module (``findings/<name>.py``) is read top to bottom as one story: its docstring is
the rule and where each threshold comes from; its class says which kind it is (``name``),
which kinds can cause it (``caused_by``), how it ranks among findings that begin at the same
step (``link``), the rule over a run's history (``check``) and the explanation a person reads
(``explain``: hypotheses, fixes, monitoring, the wrong diagnoses ruled out). The class
docstring's first paragraph is the kind's one-line lead; the rest, if any, says how it is
diagnosed. ``findings/__init__.py`` lists the kinds once; the registry, the findings
reference, the causal stories and the tests read everything from the classes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from ..detect.finding import Details, Finding, Hypothesis, Severity, Told
from ..detect.history import History
from .facts import Facts

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["LAST_LINK", "Details", "FindingKind"]
"""A kind's module builds on these: its class on ``FindingKind``, its details on ``Details``."""

LAST_LINK = 1000
"""The ``link`` of a kind that never heads a story begun at the same step as another."""


class FindingKind:
    """The base of every finding kind (see the module docstring)."""

    name: ClassVar[str]
    """The kind's name in report.json (``"exploding_gradients"``): stable, never reworded."""
    caused_by: ClassVar[tuple[str, ...]] = ()
    """The kinds that can cause this one, strongest first (the order breaks ties): a finding
    of one of them that began at or before this one makes them one story."""
    considers_zero_init: ClassVar[bool] = False
    """Weights that start at zero are a cause to weigh."""
    link: ClassVar[int] = LAST_LINK
    """When findings begin at the same step, the lower ``link`` is the first link of the
    causal chain (an exploding gradient before the loss blow-up it causes)."""
    judges_trend: ClassVar[bool] = False
    """Its rule judges the loss's trend (it should fall): with several objectives it reads
    each one whose kind of training expects that (``detect.training``), and none other."""
    setup: ClassVar[bool] = False
    """It is about what the program set up (a mode, a sign, a loss's input, a clip threshold,
    the optimizer's parameters), there from the first step whatever step its rule saw it at:
    it heads the story of what it caused, whatever their onsets and severities
    (``diagnose.stories``)."""
    statistic: ClassVar[bool] = False
    """Its rule reads a statistic, not harm (units saturated, gradients small at the input,
    updates tiny): on a run whose one objective improved clearly it is information, with
    the reason (``findings.check_all``)."""
    proxy: ClassVar[bool] = False
    """Its harm rule reads a proxy of the run's progress (the loss, a statistic) besides its
    own mechanism: where the program's own measure improved (a validation metric, a return:
    ``findings.measure_worsened``) a warning or an error of it is information. Kinds that
    judge the loss's trend or read a statistic are such proxies already."""
    harm: ClassVar[str] = ""
    """The harm a warning or an error of this kind needs, in one or two sentences (the
    findings reference states it; a kind whose rule reads harm itself says what it reads)."""
    example_details: ClassVar[Details | None] = None
    """Details for the findings reference's finding with no evidence: a kind whose
    explanation reads its details sets them."""

    def found(
        self,
        *,
        severity: Severity,
        step: int | None,
        summary: str,
        layer: str | None = None,
        **told: Unpack[Told],
    ) -> Finding:
        """A finding of this kind (``layer``: the module involved; None, the whole model)."""
        return Finding(
            kind=self.name, severity=severity, step=step, layer=layer, summary=summary, **told
        )

    def check(self, h: History) -> list[Finding]:
        """The findings of this kind in a run's history; a kind that is found while the run
        trains (the padding audit) or by the report (a log that stopped) reads it here from
        what was recorded, or returns none."""
        return []

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        """Fill in the symptom, fixes and monitoring of ``f`` and return the hypotheses
        weighed (ranked afterwards by the evidence, never by the order written here)."""
        raise NotImplementedError

    def harmless(self, f: Finding, h: History) -> str | None:
        """Why ``f``, a warning or an error, did no harm in this run (it becomes information,
        with this reason), or None. The default finds none: a kind whose rule can fire on what
        does no harm (a statistic at step 0, a transient that came back) says so here."""
        return None

    # How a finding of this kind takes part in a story (diagnose/stories.py). The defaults
    # hold for every kind but the few that override them.

    def rank(self, f: Finding) -> int:
        """This finding's ``link`` (a kind may rank some of its findings elsewhere)."""
        return self.link

    def standing(self, f: Finding) -> bool:
        """A setting rather than an event (an Adam learning rate as large as the weights): it
        joins the story of what it caused, whenever that began."""
        return False

    def root(self, f: Finding) -> bool:
        """A root cause in itself, never folded into another finding."""
        return False

    def can_cause(self, f: Finding) -> bool:
        """This finding may head the story of what it can cause (``caused_by`` of others)."""
        return True

    def told(self, f: Finding) -> bool:
        """Told as a finding of its own even when it joins another's story (a loss that was
        NaN to the end of the run: that is how it ended, whatever caused it)."""
        return False

    def until(self, f: Finding) -> int | None:
        """The step this finding's problem was over by, when it ended before the run did (a
        loss that came back); None while it lasted to the end. What began long after it
        ended is not its consequence."""
        return None

    def earliest(self, f: Finding) -> int | None:
        """The earliest step this finding may have begun at: its step, or before it when it
        is read from samples (units dead at a sample died after the last one they were
        alive at)."""
        return f.step
