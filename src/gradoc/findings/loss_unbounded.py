"""loss_unbounded: the loss falls without bound, far below anything a loss can reach.

Needs: the per-step loss of an objective expected to fall (``detect.training``: policy and
adversarial losses are not judged), and the loss's own autograd node (``meta['loss_fn']``)
for the evidence.

A loss that must fall is bounded below (a cross-entropy by 0, a reconstruction by 0, a
VAE's negative ELBO by the data's entropy). One that keeps falling through 0 by orders of
magnitude minimises something that has no minimum: a term with its sign flipped (a KL
divergence subtracted instead of added, a likelihood maximised in a loss), or a learnt
variance that collapses in a Gaussian likelihood. Rule: over the last quarter of the run
the median loss is below 0 and at least ``FACTOR`` (1,000) times the magnitude of the
median of its first ``START`` (10) steps. Our VAE with its KL term subtracted
(``tests/shapes/vae_kl_sign.py --flip``) went from 71 to -1e22 in 300 steps while its
reconstruction grew from 72 to 3e18; healthy, it ends at 9.7. The onset is the first step
from which the loss stays below 0. The gradients that grow with it (the loss's own
gradient, not the rate) and the blow-up of its terms are consequences.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, RuledOut, Weight
from ..detect.history import History
from ..detect.signals import finite, fmt, loss_trend
from .facts import Facts
from .kind import Details, FindingKind

FACTOR = 1000.0
START = 10
MIN_STEPS = 20


@dataclass(slots=True)
class Unbounded(Details):
    """Where the loss began and where it ended, and the node the loss was read through."""

    start: float
    late: float
    node: str | None


class LossUnbounded(FindingKind):
    """The loss falls through 0 by orders of magnitude: it has no minimum (a sign error)."""

    name = "loss_unbounded"
    setup = True
    harm = (
        "The loss itself: it fell through 0 to 1,000x its starting magnitude, which no bounded "
        "loss can."
    )
    link = 5
    judges_trend = True
    example_details = Unbounded(start=70.9, late=-1e21, node="SubBackward0")

    def check(self, h: History) -> list[Finding]:
        trend, _ = loss_trend(h)
        steps, values = finite(trend)
        if len(values) < MIN_STEPS:
            return []
        start = statistics.median(values[:START])
        late = statistics.median(values[-max(5, len(values) // 4) :])
        if late >= 0 or abs(late) < FACTOR * max(abs(start), 1e-12):
            return []
        above = [i for i, v in enumerate(values) if v >= 0]
        onset = steps[above[-1] + 1] if above else steps[0]  # below 0 from here on
        node = (h.meta.loss_fn or {}).get("node")
        return [
            self.found(
                severity="error",
                step=onset,
                summary=(
                    f"the loss falls without bound: from {fmt(start)} to {fmt(late)} "
                    f"({fmt(abs(late / start)) if start else 'inf'}x its start, below 0 "
                    f"from step {onset}): it has no minimum (a term with its sign flipped?)"
                ),
                evidence=[
                    Evidence(f"median loss of the first {START} steps", fmt(start)),
                    Evidence("median loss of the last quarter", fmt(late)),
                    Evidence("first step from which the loss stayed below 0", onset, step=onset),
                ]
                + ([Evidence("the loss's own autograd node", node, type="code")] if node else []),
                details=Unbounded(start, late, node if isinstance(node, str) else None),
            )
        ]

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        d = Unbounded.of(f.details)
        f.symptom = (
            f"the loss keeps falling far below 0 ({fmt(d.start)} -> {fmt(d.late)}): what is "
            "minimised has no minimum"
        )
        sign = Hypothesis(
            Family.LOOP,
            "a term of the loss with its sign flipped: a divergence or penalty subtracted instead "
            "of added (loss = rec - kl), or a likelihood maximised in a loss that is minimised",
            "print each term of the loss separately for a few steps: the one that grows without "
            "bound while the total falls is the flipped one",
            base=0.4,
        )
        collapse = Hypothesis(
            Family.NUMERICS,
            "a learnt variance or scale that collapses to 0 in a Gaussian log-likelihood "
            "(the density grows without bound)",
            "log the smallest predicted variance (logvar.min()) per step",
            base=0.15,
        )
        fell = f"the loss fell from {fmt(d.start)} to {fmt(d.late)}, {FACTOR:g}x past its start"
        sign.seen(fell, Weight.DECISIVE, step=f.step)
        collapse.seen(fell, Weight.MODERATE, step=f.step)
        if d.node == "SubBackward0":
            sign.seen(
                "the loss handed to backward() is a difference (its node is SubBackward0): a "
                "term is subtracted",
                Weight.STRONG,
            )
        f.ruled_out.append(
            RuledOut(
                "not a learning rate too high",
                f"the loss kept falling ({fmt(d.start)} -> {fmt(d.late)}): a rate too high makes "
                "it rise or oscillate; the growing gradients are the unbounded loss's own",
            )
        )
        f.fixes += [
            Fix(
                Horizon.IMMEDIATE,
                "check the sign of every term of the loss (a VAE's loss is reconstruction + KL, "
                "with KL >= 0)",
            ),
            Fix(
                Horizon.SHORT_TERM,
                "assert the terms that must be >= 0 are (kl >= 0) and log each term, not only "
                "their sum",
            ),
            Fix(
                Horizon.LONG_TERM,
                "bound learnt variances (clamp the log-variance) and test the loss on a batch "
                "with a known value",
            ),
        ]
        f.monitoring.append("each term of the loss, separately, every step")
        return [sign, collapse]
