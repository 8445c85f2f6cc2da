"""loss_on_probabilities: a loss that takes logits was given probabilities (or one that takes
log-probabilities was given raw scores).

``nll_loss`` given a softmax's output (not ``log_softmax``'s) is the same mistake one step on:
it takes log-probabilities, so its loss is minus the probability of the right class, between
-1 and 0, and its gradient through the softmax vanishes wherever the model is confidently
wrong (``fed: "probabilities"``; ``tests/mechanisms/nll_on_softmax.py``).

``nll_loss`` given a layer's output with no ``log_softmax`` (``fed: "logits"``) is minus
the right class's score: it falls without bound as the model raises that score, below 0 where
no log-likelihood can go. The graph shows the layer under the loss and the loss's value below
0 confirms it: a **warning** then. Two public graph networks do both (``nll_loss`` on a
softmax, -0.14 to -0.51; on raw scores, -0.001 to -76.9 at 14% accuracy). The walk below the
loss goes through what leaves the values as they are or drops some: the training rows
indexed out of all the nodes, a dropout, a view (``collect.graph.losses._SHAPING``).

Needs: the loss's own autograd node (``meta['loss_fn']``, read once at the first
``backward()`` by ``collect/graph/losses.py``): ``fed`` is set when the input of a cross-entropy
went through a softmax (``F.cross_entropy(model(x), y)`` with an ``nn.Softmax`` ending the
model) or the input of ``binary_cross_entropy_with_logits`` through a sigmoid.

``cross_entropy`` applies ``log_softmax`` itself. Given probabilities p in [0, 1], it takes
the softmax of p: the k scores differ by at most 1, so the loss cannot fall below
``-log(e / (e + k - 1))`` (0.905 for 5 classes) however right the model is, and its
gradient is damped by the softmax's Jacobian. That is the mechanism seen directly, with no
healthy use: a **warning** whenever it is seen. Our 5-class classifier ending in
``nn.Softmax`` (``tests/shapes/softmax_into_ce.py``) stalls at 0.905, its floor, at 100%
accuracy, while the same model on logits reaches 0.0007.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, Weight
from ..detect.history import History
from ..detect.signals import finite, fmt, loss_trend
from .facts import Facts
from .kind import Details, FindingKind

_LOGITS = {
    "softmax": "cross_entropy",
    "sigmoid": "binary_cross_entropy_with_logits",
    "probabilities": "nll_loss",
    "logits": "nll_loss",
}


@dataclass(slots=True)
class Squashed(Details):
    """What squashed the loss's input, and the lowest loss the run reached."""

    fed: str
    classes: int | None
    lowest: float | None


class LossOnProbabilities(FindingKind):
    """A loss that applies its own softmax (or sigmoid) was given probabilities, not logits."""

    name = "loss_on_probabilities"
    setup = True
    harm = (
        "The mechanism itself: a loss that takes logits (or log-probabilities) was given "
        "probabilities, which bounds it away from its minimum and damps its gradient."
    )
    link = 4
    example_details = Squashed(fed="softmax", classes=5, lowest=0.95)

    def check(self, h: History) -> list[Finding]:
        fn = h.meta.loss_fn or {}
        fed = fn.get("fed")
        if fed not in _LOGITS:
            return []
        classes = fn.get("classes") if isinstance(fn.get("classes"), int) else None
        _, values = finite(loss_trend(h)[0])
        lowest = min(values) if values else None
        if fed == "logits" and not (lowest is not None and lowest < 0):
            return []  # raw scores the graph shows, and a loss below 0 that confirms them
        floor = _floor(classes) if fed == "softmax" else None
        return [
            self.found(
                severity="warning",
                step=0,
                summary=(
                    _said(fed)
                    + (f"; the loss reached {fmt(lowest)} at best" if lowest is not None else "")
                    + (f" and cannot fall below {fmt(floor)}" if floor is not None else "")
                ),
                evidence=[
                    Evidence(
                        "the loss's input went through", f"{fed} (autograd graph)", type="code"
                    ),
                    Evidence("lowest loss of the run", fmt(lowest) if lowest is not None else None),
                ]
                + (
                    [Evidence("lowest loss reachable on probabilities", fmt(floor))]
                    if floor
                    else []
                ),
                details=Squashed(fed, classes, lowest),
            )
        ]

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        d = Squashed.of(f.details)
        if d.fed == "logits":
            return _raw_scores(f, d)
        f.symptom = (
            "the loss is a probability, not a log-likelihood: it sits between -1 and 0"
            if d.fed == "probabilities"
            else "the loss stalls above 0 however well the model classifies"
        )
        nll = d.fed == "probabilities"
        twice = Hypothesis(
            Family.ARCHITECTURE,
            "the model ends in a softmax and nll_loss takes its output as log-probabilities: "
            "the log is missing"
            if nll
            else f"the model ends in a {d.fed} and the loss applies its own: "
            f"{_LOGITS[d.fed]} expects logits",
            f"check the model's last layer: remove the {d.fed} (apply it only where "
            "probabilities are read, at inference)",
            base=0.4,
        )
        squash = "softmax" if nll else d.fed
        twice.seen(
            f"the loss's input is the output of a {squash} (read from its autograd graph)",
            Weight.DECISIVE,
        )
        if d.lowest is not None:
            twice.seen(f"the loss reached {fmt(d.lowest)} at best", Weight.MODERATE)
        f.fixes += [
            Fix(
                Horizon.IMMEDIATE,
                "end the model in log_softmax instead of softmax (or give the logits to "
                "F.cross_entropy)"
                if nll
                else f"drop the final {d.fed} from the model and hand the logits to "
                f"{_LOGITS[d.fed]}",
            ),
            Fix(
                Horizon.SHORT_TERM,
                "if probabilities are needed in training, use torch.log(p) with F.nll_loss "
                "(clamped: p.clamp_min(1e-12)), never cross_entropy(p)",
            ),
        ]
        f.monitoring.append("the loss's floor: a classifier's loss should approach 0 on easy data")
        return [twice]


def _said(fed: str) -> str:
    if fed == "probabilities":
        return (
            "nll_loss was given probabilities, not log-probabilities: its input is a softmax's "
            "output, so the loss is minus the right class's probability (between -1 and 0), "
            "whose gradient vanishes where the model is confidently wrong"
        )
    if fed == "logits":
        return (
            "nll_loss was given raw scores, not log-probabilities: its input is a layer's output "
            "with no log_softmax, so the loss is minus the right class's score and falls without "
            "bound as the model raises it (a negative log-likelihood is never below 0)"
        )
    return (
        f"{_LOGITS[fed]} was given probabilities: its input went through a {fed} already, so "
        "the loss applies a second one"
    )


def _raw_scores(f: Finding, d: Squashed) -> list[Hypothesis]:
    """nll_loss on a layer's output: the log_softmax left out."""
    f.symptom = "the loss falls below 0 and on without bound: it is no log-likelihood"
    missing = Hypothesis(
        Family.ARCHITECTURE,
        "the model's output is raw scores and nll_loss takes them as log-probabilities: the "
        "log_softmax is missing",
        "check what feeds nll_loss: F.log_softmax(out, dim=1) should be its last op",
        base=0.4,
    )
    missing.seen(
        "the loss's input is a layer's output (read from its autograd graph)", Weight.DECISIVE
    )
    if d.lowest is not None:
        missing.seen(
            f"the loss reached {fmt(d.lowest)}, below 0, where no log-likelihood can",
            Weight.STRONG,
        )
    f.fixes += [
        Fix(
            Horizon.IMMEDIATE,
            "F.log_softmax(out, dim=1) before nll_loss, or F.cross_entropy(out, y) on the scores",
        ),
        Fix(Horizon.SHORT_TERM, "assert loss >= 0 on the first steps of a classifier"),
    ]
    f.monitoring.append("the loss's sign: a negative log-likelihood is never below 0")
    return [missing]


def _floor(classes: int | None) -> float | None:
    """The lowest cross-entropy of the softmax of probabilities over ``classes`` classes: the
    right class at 1 and the others at 0, ``-log(e / (e + k - 1))``."""
    if not classes or classes < 2:
        return None
    return -math.log(math.e / (math.e + classes - 1))
