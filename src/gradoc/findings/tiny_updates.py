"""tiny_updates: the optimizer does not move the weights.

Needs: per-parameter update and weight norms (params schedule).

Rule (SageMaker Debugger): ||update|| / ||weight|| below ``RATIO`` (1e-8) on every sampled
step after step 0, with at least ``MIN_SAMPLES`` (3) samples, for a weight matrix that gets
gradients. Frozen parameters have no gradient and are never judged. At float32
precision, an update below ~6e-8 of a weight is lost entirely, so such a step is a no-op.
"""

from __future__ import annotations

from ..detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, Weight
from ..detect.history import History
from ..detect.signals import fmt, update_ratios
from .advice import lr_fix, related
from .facts import Facts
from .kind import FindingKind

RATIO = 1e-8
MIN_SAMPLES = 3


class TinyUpdates(FindingKind):
    """The optimizer steps do not change the weights."""

    name = "tiny_updates"
    harm = (
        "A statistic: weights that never moved are a warning unless the run's one objective still "
        "improved clearly (halved), when they are information."
    )
    statistic = True
    caused_by = ("zero_clip", "adam_epsilon", "nonfinite", "vanishing_gradients", "dead_units")
    considers_zero_init = True
    link = 130

    def check(self, h: History) -> list[Finding]:
        stuck = [
            (name, max(s.values), s.steps[0])
            for name, s in update_ratios(h).items()
            if len(s.values) >= MIN_SAMPLES and max(s.values) < RATIO
        ]
        if not stuck:
            return []
        name, peak, step = stuck[0]
        total = len(update_ratios(h))
        return [
            self.found(
                severity="warning",
                step=step,
                layer=h.module_of(name),
                summary=(
                    f"tiny updates: {len(stuck)} of {total} weight matrices never moved by more "
                    "than "
                    f"{fmt(peak)} of their norm (first: {name})"
                ),
                evidence=[
                    Evidence(f"largest update/weight ratio of {n}", fmt(p))
                    for n, p, _ in stuck[:10]
                ]
                + [
                    Evidence(
                        "learning rate (group 0)", fmt(h.lr.values[-1]) if h.lr.values else "-"
                    )
                ],
            )
        ]

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        f.symptom = "the optimizer steps do not change the weights"
        lr = Hypothesis(
            Family.LEARNING_RATE,
            "learning rate far too low (or a scheduler that decayed it to ~0)",
            "print optimizer.param_groups[i]['lr'] at the failing steps",
            base=0.2,
        )
        grad = Hypothesis(
            Family.GRADIENTS,
            "gradients that are ~0 (vanishing or dead units)",
            "print the gradient norms of the stuck layers",
            base=0.1,
        )
        if facts.lr is not None:
            if facts.lr < 1e-6:
                lr.seen(f"learning rate {fmt(facts.lr)}", Weight.STRONG)
            else:
                lr.against(f"learning rate {fmt(facts.lr)}", Weight.MODERATE)
        else:
            lr.unseen("the learning rate (not recorded)")
        if related(f, "vanishing_gradients") or related(f, "dead_units"):
            grad.seen("gradients vanish or units are dead in this run", Weight.STRONG)
        f.fixes += [
            lr_fix(10.0, "check the learning rate and the scheduler; raise it (10x to start)"),
            Fix(
                Horizon.SHORT_TERM, "make sure the layers meant to train are not frozen or detached"
            ),
        ]
        f.monitoring += [
            "learning rate per param group",
            "update/weight ratio per layer (alert below 1e-8)",
        ]
        return [lr, grad]
