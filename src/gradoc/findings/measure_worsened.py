"""measure_worsened: the program's own measure of the run got worse.

Needs: a measure the program logged itself (``collect.attach.logged``) on data it does not train on
(a name with ``val``, ``eval``, ``test``, ``dev``) or an agent's reward or return, with a
direction (``detect.measures``: from the program's checkpoint ``mode``, else from the name),
at least 5 values, and a last value logged in the run's last quarter.

The loss handed to ``backward()`` is the program's proxy; these are its measure. A measure
has worsened when the median of its last fifth of values is worse than the median of its
first fifth by a quarter of its range, or worse than its best running median by half of it
(``detect.measures.trend``). That is the harm itself: a **warning**. What it means depends on
the training loss beside it: a validation measure that turned worse while the training loss
went on falling is overfitting; one that turned worse with it is the training going wrong;
a return that fell is the agent unlearning (a rate too high for the policy, a collapse of its
exploration). Where a measure of either role improved and none worsened, the loss trends and
statistics that would have been warnings are information (``findings.check_all``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..detect.finding import Details, Evidence, Family, Finding, Fix, Horizon, Hypothesis, Weight
from ..detect.history import History
from ..detect.measures import Trend, role, trend
from ..detect.signals import fmt, loss_improved
from .facts import Facts
from .kind import FindingKind

COVERS = 0.75
"""A measure judges the run when its last value was logged at least this far into it."""


@dataclass(slots=True)
class Worsened(Details):
    """Which measure worsened, its role, and whether the training loss fell beside it."""

    measure: str
    role: str
    """``held_out`` or ``return`` (``detect.measures.role``)."""
    overfitting: bool
    """A held-out measure worsened while the training loss went on falling."""


def judging(h: History) -> list[Trend]:
    """The trends of the program's measures that judge the run (see the module docstring):
    returns first, then held-out measures."""
    last = max(0, (h.counted or len(h.loss) or 1) - 1)
    found = []
    for m in h.measures:
        if role(m.name) == "training" or not m.series.steps:
            continue
        if m.series.steps[-1] < COVERS * last:
            continue
        t = trend(m)
        if t is not None:
            found.append(t)
    return sorted(found, key=lambda t: role(t.measure.name) != "return")


class MeasureWorsened(FindingKind):
    """The program's own measure of the run (a validation metric, an episode return) got
    worse."""

    name = "measure_worsened"
    harm = (
        "The harm itself, in the program's own measure: its last fifth of values worse than its "
        "first fifth by a quarter of its range, or than its best by half of it."
    )
    caused_by = (
        "nonfinite",
        "policy_collapse",
        "exploding_gradients",
        "large_updates",
        "loss_blowup",
        "loss_divergence",
        "dead_units",
    )
    link = 90
    example_details = Worsened("val_loss", "held_out", overfitting=True)

    def check(self, h: History) -> list[Finding]:
        worse = next((t for t in judging(h) if t.verdict == "worsened"), None)
        if worse is None:
            return []
        m = worse.measure
        said = worse.said()
        train = loss_improved(h)
        if role(m.name) == "held_out":
            if train is not None:
                said += (
                    f", while the training loss fell from {fmt(train[0])} to {fmt(train[1])}: "
                    "the model fits its training data and less and less the rest (overfitting)"
                )
            else:
                said += ", and the training loss did not improve beside it"
        step = worse.best_step if worse.best_step < m.series.steps[-1] else m.series.steps[0]
        return [
            self.found(
                severity="warning",
                step=step,
                summary=said,
                evidence=[
                    Evidence(f"{m.name}, its first values (median)", fmt(worse.start)),
                    Evidence(f"{m.name}, its best (running median)", fmt(worse.best)),
                    Evidence(f"{m.name}, its last values (median)", fmt(worse.end)),
                    Evidence(f"{m.name}, read from", m.source),
                    Evidence(f"{m.name}, better {m.direction} by", m.why),
                ],
                details=Worsened(m.name, role(m.name), train is not None),
            )
        ]

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        d = Worsened.of(f.details)
        name, held_out = d.measure, d.role == "held_out"
        f.symptom = f"the program's {name} got worse while it trained"
        f.monitoring += [f"{name} beside the training loss, on the same steps"]
        if held_out:
            over = Hypothesis(
                Family.REGULARIZATION,
                "overfitting: the model learns its training data and stops generalising",
                f"compare {name} with the same measure on the training data: a gap that grows "
                "is overfitting",
                base=0.3,
            )
            rate = Hypothesis(
                Family.LEARNING_RATE,
                "the learning rate too high late in training: the weights move past the "
                "minimum the held-out data shares",
                "re-run with the learning rate divided by 10 after the best step",
                base=0.1,
            )
            if d.overfitting:
                over.seen("the training loss went on falling while it worsened", Weight.STRONG)
                rate.against("the training loss went on falling", Weight.MODERATE)
            else:
                over.against("the training loss did not improve either", Weight.STRONG)
                rate.seen("the training loss did not improve either", Weight.MODERATE)
            f.fixes += [
                Fix(Horizon.IMMEDIATE, f"keep the checkpoint of {name}'s best step"),
                Fix(
                    Horizon.SHORT_TERM,
                    f"stop early on {name} (Lightning's EarlyStopping, the Trainer's "
                    "load_best_model_at_end), and add regularisation: weight decay, dropout, "
                    "augmentation",
                ),
                Fix(Horizon.LONG_TERM, "more training data, or a smaller model"),
            ]
            return [over, rate]
        rate = Hypothesis(
            Family.LEARNING_RATE,
            "the policy's learning rate too high: an update moved it out of what it had learnt",
            "re-run with the learning rate divided by 10 (and the PPO clip, the KL limit, kept)",
            base=0.3,
        )
        collapse = Hypothesis(
            Family.LOOP,
            "the policy stopped exploring (its entropy collapsed) and settled on a worse action",
            "log the policy's entropy beside the return",
            base=0.1,
        )
        f.fixes += [
            Fix(Horizon.IMMEDIATE, f"keep the checkpoint of {name}'s best step"),
            Fix(
                Horizon.SHORT_TERM,
                "lower the learning rate (or anneal it), and bound the policy's update: PPO's "
                "clip range, a KL limit, gradient clipping",
            ),
            Fix(Horizon.LONG_TERM, "an entropy bonus that keeps the policy exploring"),
        ]
        return [rate, collapse]
