"""loss_divergence: the loss climbs away from its best level and does not come back.

Needs: the per-step loss (per sample when it is a sum over samples; see
``signals.loss_trend``).

Rule: smooth the finite losses with a rolling median (window ``w = max(1, min(50, n // 20))``:
small batches make single-step losses swing 10x, and the best of a lightly smoothed
series is biased low);
the loss diverges at the first step where the smoothed loss exceeds ``RISE`` (2) times its
best level so far (the lowest rolling median over a ``BEST_WIDTH`` (3)x wider window: the
low of a lightly smoothed noisy series is an excursion, not a level: a healthy 100-step
Adam run, batch 32, its loss 0.07-0.5 around 0.25 late on, had a 5-step median low of
0.13 and later 0.28, a "divergence"; benchmarks/accuracy.py, calibration split,
mlp:healthy:adam) and every later smoothed value stays above ``STAY`` (1.5) times that
best for at least ``max(PERSIST, w)`` steps (PERSIST = 3), or for 2 steps and then turns
non-finite. A short
excursion that returns is a loss spike instead; one noisy last step is nothing (a
12-step run with batch noise showed a last loss of 2.4x its best). The rise must also
win back at least ``MIN_SHARE`` (10%) of the ground gained since the start: a converged
regression loss wandering between 0.001 and 0.003 (from 0.22) is noise, not divergence.
A loss that is ever below 0 (an RL objective, a log-likelihood) has no scale for "twice
its best" and is left alone.

:func:`diverged` is the rule at one point, shared with the guard, which applies it online
to its rolling median (``GuardConfig.divergence_window``, ``divergence_factor``) and rolls
back; a divergence the guard rolled back is reported from its ``rollback`` event (after a
rollback the loss comes back down, so the curve alone no longer shows it).
"""

from __future__ import annotations

import math
import statistics

from ..detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, RuledOut, Weight
from ..detect.history import History
from ..detect.signals import diverged, finite, fmt, loss_trend
from ..store import EventKind
from .advice import (
    at,
    clipping,
    grad_jump,
    lr_fix,
    lr_too_high,
    related,
    update_signs,
    warmup_fix,
    weight_decay,
)
from .facts import Facts
from .kind import FindingKind

STAY = 1.5
PERSIST = 3
MIN_STEPS = 5
BEST_WIDTH = 3


def _rolled_back(h: History) -> list[Finding]:
    """The guard rolled back a divergence: the report names it too."""
    for e in h.events:
        reason = str(e.data.get("reason", ""))
        if e.kind == EventKind.ROLLBACK and e.data.get("diverged") and e.step is not None:
            to = e.data.get("to_step")
            return [
                Finding(
                    kind="loss_divergence",
                    severity="error",
                    step=e.step,
                    layer=None,
                    summary=f"loss diverged at step {e.step}; the guard rolled back to step {to}",
                    evidence=[
                        Evidence("the guard's divergence check", reason),
                        Evidence("rolled back to the snapshot of step", to),
                    ],
                )
            ]
    return []


def _from_the_curve(h: History) -> list[Finding]:
    trend, _ = loss_trend(h)
    steps, values = finite(trend)
    ends_nonfinite = bool(trend.values) and not math.isfinite(trend.values[-1])
    if len(values) < MIN_STEPS or min(values) < 0:
        return []  # an objective that goes below 0 (RL, log-likelihoods) has no "2x its best"
    w = max(1, min(50, len(values) // 20))
    smooth = [statistics.median(values[max(0, i - w + 1) : i + 1]) for i in range(len(values))]
    wide = BEST_WIDTH * w
    level = [statistics.median(values[max(0, i - wide + 1) : i + 1]) for i in range(len(values))]
    best = math.inf
    for i, step in enumerate(steps):
        best = min(best, level[i])
        if not diverged(smooth[i], best, smooth[0]):
            continue
        if not all(x > STAY * best for x in smooth[i:]):
            continue
        # a rise into NaN/Inf needs 2 elevated steps; a rise that stays finite needs 3
        if len(smooth) - i >= (2 if ends_nonfinite else max(PERSIST, w)):
            peak = max(values[i:])
            return [
                Finding(
                    kind="loss_divergence",
                    severity="error",
                    step=step,
                    layer=None,
                    summary=(
                        f"loss diverged from step {step}: {fmt(smooth[i])} against a best of "
                        f"{fmt(best)}" + (", then turned non-finite" if ends_nonfinite else "")
                    ),
                    evidence=[
                        Evidence("best smoothed loss before", fmt(best)),
                        Evidence("smoothed loss at the onset", fmt(smooth[i]), step=step),
                        Evidence("highest finite loss after", fmt(peak)),
                    ],
                )
            ]
    return []


class LossDivergence(FindingKind):
    """The loss climbs and does not come back."""

    name = "loss_divergence"
    harm = "The loss itself: it climbed to twice its best and stayed up (or turned non-finite)."
    judges_trend = True
    caused_by = (
        "accumulating_gradients",
        "nonfinite",
        "loss_blowup",
        "exploding_gradients",
        "attention_logit_growth",
        "output_logit_divergence",
    )
    link = 70

    def check(self, h: History) -> list[Finding]:
        found = _from_the_curve(h)
        return found or _rolled_back(h)

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        f.symptom = f"the loss climbs from {at(f)} and does not come back"
        lr = lr_too_high(0.3)
        grad = Hypothesis(
            Family.GRADIENTS,
            "exploding gradients",
            "plot the global gradient norm around the onset",
            base=0.1,
        )
        update_signs(lr, facts, f)
        if (large := related(f, "large_updates")) is not None:
            lr.seen(large.summary, Weight.STRONG, step=large.step)
        if h.lr.values and len(h.lr.values) > 1 and max(h.lr.values) > 1.5 * h.lr.values[0]:
            lr.seen(
                f"the learning rate rose {max(h.lr.values) / h.lr.values[0]:.3g}x during the run",
                Weight.MODERATE,
            )
        jump = grad_jump(h, None if f.step is None else f.step + 5, facts)
        if jump is not None:
            rise = f"the gradient norm rose {fmt(jump[1])}x its median by step {jump[0]}"
            grad.seen(rise, Weight.MODERATE, step=jump[0])
            if jump[0] > 0 and h.grad_norm.steps and h.grad_norm.steps[0] == 0:
                # ordinary before any update, too large once updates began: the updates did it
                lr.seen(
                    f"{rise}, after the updates began (step 0: ordinary)",
                    Weight.MODERATE,
                    step=jump[0],
                )
        else:
            grad.unseen("a gradient norm 10x its median around the onset")
        f.ruled_out.append(
            RuledOut(
                "overfitting",
                "overfitting lowers the training loss; here the training loss itself rises",
            )
        )
        f.fixes += [
            lr_fix(0.1, "lower the learning rate by 10x and resume from before the onset"),
            warmup_fix(facts, "add a warm-up"),
            Fix(Horizon.LONG_TERM, "choose the learning rate with a range test; decay it"),
        ]
        f.monitoring.append("smoothed loss against its best so far (alert at 2x)")
        clipping(f, lr, facts)
        decay = weight_decay(f, facts, lr)
        return [lr, grad] + ([decay] if decay else [])
