"""findings: every finding kind, one class in one module (``kind.py`` has the shape).

:data:`KINDS` registers them, once: the order is the findings reference's, and the order
in which their rules read a run's history. Everything else (the registry, the causal
stories, the reference, the tests) reads the classes. Adding a kind end to end is one
module here, one line in :data:`KINDS`, its tests and the regenerated reference
(``docs/development.md``).
"""

from __future__ import annotations

from ..detect.finding import SEVERITY_ORDER, Evidence, Finding
from ..detect.history import History
from ..detect.measures import Trend
from ..detect.signals import fmt, improved
from ..detect.training import Objective
from .accumulating_gradients import AccumulatingGradients
from .adam_epsilon import AdamEpsilon
from .adversarial_imbalance import AdversarialImbalance
from .attention_logit_growth import AttentionLogitGrowth
from .critic_unconstrained import CriticUnconstrained
from .dead_units import DeadUnits
from .eval_mode import EvalMode
from .exploding_gradients import ExplodingGradients
from .fp16_overflow import Fp16Overflow
from .fp16_underflow import Fp16Underflow
from .frozen_parameters import FrozenParameters
from .game_stopped import GameStopped
from .kind import FindingKind
from .large_updates import LargeUpdates
from .length_anomaly import LengthAnomaly
from .log_incomplete import LogIncomplete
from .loss_blowup import LossBlowup
from .loss_divergence import LossDivergence
from .loss_includes_padding import LossIncludesPadding
from .loss_on_probabilities import LossOnProbabilities
from .loss_plateau import LossPlateau
from .loss_spike import LossSpike
from .loss_unbounded import LossUnbounded
from .loss_unread import LossUnread
from .measure_worsened import MeasureWorsened, judging
from .monitoring_stopped import MonitoringStopped
from .nonfinite import Nonfinite
from .output_logit_divergence import OutputLogitDivergence
from .padding_leak import PaddingLeak
from .padding_waste import PaddingWaste
from .policy_collapse import PolicyCollapse
from .poor_initialization import PoorInitialization
from .saturated_units import SaturatedUnits
from .tiny_updates import TinyUpdates
from .vanishing_gradients import VanishingGradients
from .weight_decay_dominates import WeightDecayDominates
from .zero_clip import ZeroClip

KINDS: tuple[type[FindingKind], ...] = (
    Nonfinite,
    ExplodingGradients,
    VanishingGradients,
    DeadUnits,
    SaturatedUnits,
    LossSpike,
    LossBlowup,
    LossDivergence,
    LossPlateau,
    LossUnbounded,
    LossOnProbabilities,
    AdversarialImbalance,
    GameStopped,
    CriticUnconstrained,
    PolicyCollapse,
    MeasureWorsened,
    PoorInitialization,
    LargeUpdates,
    TinyUpdates,
    AttentionLogitGrowth,
    OutputLogitDivergence,
    AdamEpsilon,
    Fp16Overflow,
    Fp16Underflow,
    PaddingLeak,
    LossIncludesPadding,
    LengthAnomaly,
    PaddingWaste,
    AccumulatingGradients,
    FrozenParameters,
    EvalMode,
    ZeroClip,
    WeightDecayDominates,
    LogIncomplete,
    MonitoringStopped,
    LossUnread,
)

REGISTRY: dict[str, FindingKind] = {}
"""Every registered kind by its name, in :data:`KINDS`' order."""


def register(kind: type[FindingKind]) -> FindingKind:
    """Add ``kind`` to :data:`REGISTRY` (done for each of :data:`KINDS` on import; a test's
    throwaway kind registers itself the same way). Its ``caused_by`` names must be known."""
    if kind.name in REGISTRY and type(REGISTRY[kind.name]) is not kind:
        raise ValueError(f"two finding kinds are named {kind.name!r}")
    known = {*REGISTRY, *(k.name for k in KINDS)} - {kind.name}
    unknown = [c for c in kind.caused_by if c not in known]
    if unknown:
        raise ValueError(f"{kind.name}: caused_by names {unknown}, which are not finding kinds")
    made = REGISTRY[kind.name] = kind()
    return made


def unregister(name: str) -> None:
    """Remove a kind :func:`register` added (a test's throwaway kind)."""
    REGISTRY.pop(name, None)


def check_all(h: History) -> list[Finding]:
    """Every registered kind's findings in a run's history, most severe first, then by step.
    A warning or an error that did no harm in the run is information, with the reason: each
    kind's own harm rule first (``FindingKind.harmless``), then the statistics'
    (:func:`_no_harm`)."""
    objectives = h.objectives
    found = []
    for kind in REGISTRY.values():
        if not kind.judges_trend or (len(objectives) == 1 and objectives[0].judged):
            found += [(f, h) for f in kind.check(h)]
            continue
        for o in objectives:
            if o.judged:  # judged by its own loss, named after it (read on enough steps)
                judged = h.of_objective(o)
                found += [(_of(f, o.name, len(objectives)), judged) for f in kind.check(judged)]
    for f, seen in found:
        _harmless(f, seen)
    findings = [f for f, _ in found]
    if len(objectives) == 1 and objectives[0].judged:
        _no_harm(findings, objectives[0])
    _measured(findings, h)
    return sorted(findings, key=lambda f: (SEVERITY_ORDER[f.severity], _step(f)))


def _harmless(f: Finding, h: History) -> None:
    kind = REGISTRY.get(f.kind)
    if kind is None or f.severity == "info":
        return
    why = kind.harmless(f, h)
    if why is not None:
        f.severity = "info"
        f.summary += f" (information: {why})"


def _no_harm(found: list[Finding], objective: Objective) -> None:
    """Harm before alarm: a statistic alone (a kind whose ``statistic`` is set) on a run whose
    objective improved clearly, and that nothing non-finite or trend-breaking accompanies,
    is information, with the reason. A saturated layer or small input gradients in a model
    whose loss fell 10x did not stop it learning."""
    if any(
        REGISTRY[f.kind].judges_trend or f.kind == "nonfinite"
        for f in found
        if f.kind in REGISTRY and f.severity != "info"
    ):
        return
    better = improved(objective.loss)
    if better is None:
        return
    early, late = better
    for f in found:
        kind = REGISTRY.get(f.kind)
        if kind is not None and kind.statistic and f.severity == "warning":
            f.severity = "info"
            f.summary += (
                f" (information: the loss fell from {fmt(early)} to {fmt(late)}, so this did "
                "not stop the model learning)"
            )


def _measured(found: list[Finding], h: History) -> None:
    """Harm in the program's own measure: where a validation measure or a return the program
    logged improved (``findings.measure_worsened.judging``) and none worsened, a loss trend or
    a statistic is no harm done, and a warning or an error of one is information, with the
    measure's numbers. A value function's loss that rose as the returns grew, a dead unit in
    a model whose validation accuracy rose: the program's measure says the run went well."""
    trends = judging(h)
    if not trends:
        return
    better = next((t for t in trends if t.verdict == "improved"), None)
    if better is None or any(t.verdict == "worsened" for t in trends):
        _said_in_measure(found, trends)
        return
    for f in found:
        kind = REGISTRY.get(f.kind)
        if (
            kind is None
            or f.severity == "info"
            or not (kind.judges_trend or kind.statistic or kind.proxy)
        ):
            continue
        f.severity = "info"
        f.summary += f" (information: {better.said()}, so by its own measure the run improved)"


def _said_in_measure(found: list[Finding], trends: list[Trend]) -> None:
    """The program's measure did not improve: each warning and error carries what it did,
    in its own numbers (the harm as the program sees it)."""
    worst = next((t for t in trends if t.verdict == "worsened"), trends[0])
    for f in found:
        if f.severity != "info" and f.kind != "measure_worsened":
            f.evidence.append(Evidence("the program's own measure", worst.said()))


def _of(f: Finding, objective: str, count: int) -> Finding:
    """A finding about one of several objectives says which."""
    if count > 1:
        f.objective = objective
        f.summary = f"{objective}: {f.summary}"
    return f


def _step(f: Finding) -> int:
    return f.step if f.step is not None else -1


for _kind in KINDS:
    register(_kind)

__all__ = ["KINDS", "REGISTRY", "FindingKind", "check_all", "register", "unregister"]
