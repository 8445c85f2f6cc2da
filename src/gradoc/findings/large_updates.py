"""large_updates: one optimizer step moves weights by a large part of their size.

Needs: per-parameter update and weight norms (params schedule); for the second rule, the
optimizer's type (``meta['optimizers']``) and the learning rate.

1. Measured: for a weight matrix, ||update|| / ||weight|| above ``RATIO`` (0.3) on any
   sampled step after step 0 (step 0 is skipped: zero-initialised tensors). Healthy
   updates are ~1e-3 (Karpathy's rule of thumb; the calibration runs: 1e-4 to 0.1).
   SageMaker Debugger's threshold of 10 never fires in practice: once updates are that
   large the weights grow with them, and the ratio of an SGD run at learning rate 50
   stays near 1. Steps after which the loss still falls 10x (``CONVERGED``) to the end are
   the optimizer closing in on a small model (pytorch/examples' polynomial regression, a
   1x4 weight moved 0.4 of its norm at step 10 while its loss fell from 30 to 1e-3;
   ``../shared/real-programs`` regression_manual_sgd_healthy).
2. Allowed (``rule: adam_lr``): Adam and its kin normalise each element's step, so one
   step moves a weight by up to about the learning rate whatever the gradient's scale.
   A learning rate at or above ``ADAM_LR`` (1.0) x the typical weight (the median RMS of
   the weight matrices, at the step the rate peaked) lets one step rewrite the weights.
   The measured ratio can stay small then (noisy gradients make Adam's steps cancel),
   which is why the setting itself is the evidence. The rate is read against the weights
   at every sampled step, the first ones included, not only where it peaked: under a
   warm-up the weights can inflate as fast as the rate grows. So a peak rate at or above
   ``ADAM_LR`` x the weights' RMS at the first sample (the scale they were built at) counts
   too when the weights have left that scale: their median RMS grew ``INFLATED`` (4x) or
   more. A GPT-2-initialised transformer (RMS 0.02) under AdamW at lr 0.1, warmed up over
   30 steps and clipped at 1.0 (``tests/shapes/adamw_lr_x100.py``): 0.69 at step 10, 0.25
   at the peak, weights inflated 20x to 0.40 and the loss stalled at 3.2 against 1.28; at
   lr 1e-3 the weights grew 1.5x. Calibration
   (``../shared/real-programs``): healthy Adam runs 0.007-0.08 (nanoGPT, minGPT, makemore,
   the word LMs) and 0.58 (the actor-critic, lr 3e-2 on default-initialised layers); the
   same programs with the rate 100-1000x: 1.36 (nanoGPT, lr 0.1), 2.4, 7-8, 26, 58. A
   setting, not an event: the diagnosis folds it into what it caused (a blow-up).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ..detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, Weight
from ..detect.history import History
from ..detect.signals import (
    ADAM_FAMILY,
    finite,
    fmt,
    loss_trend,
    numel_of,
    update_ratios,
    weight_params,
)
from .advice import at, clip_advice, clipping, lr_fix, lr_too_high
from .facts import Facts
from .kind import Details, FindingKind

RATIO = 0.3
CONVERGED = 10.0
ADAM_LR = 1.0
INFLATED = 4.0


def _measured(h: History) -> list[Finding]:
    hits = []
    for name, series in update_ratios(h).items():
        over = [(s, r) for s, r in zip(series.steps, series.values) if r > RATIO]
        if over:
            hits.append((over[0][0], name, over[0][1], max(r for _, r in over)))
    if not hits:
        return []
    hits.sort()
    step, name, ratio, peak = hits[0]
    if _converging(h, step):
        return []
    return [
        Finding(
            kind="large_updates",
            severity="warning",
            step=step,
            layer=h.module_of(name),
            summary=(
                f"large updates: a step moved {name} by {fmt(ratio)} of its norm at step {step}"
            ),
            evidence=[
                Evidence(f"update norm / weight norm of {n}", fmt(r), step=s)
                for s, n, r, _ in hits[:10]
            ]
            + [Evidence("highest update/weight ratio", fmt(peak))],
        )
    ]


def _converging(h: History, step: int) -> bool:
    """The loss fell ``CONVERGED``x (10) from the large steps to the end of the run: they
    were the optimizer closing in, not an instability."""
    at = [v for s, v in zip(*finite(loss_trend(h)[0])) if s >= step]
    if len(at) < 10:
        return False
    end = statistics.median(at[-max(3, len(at) // 10) :])
    return 0 < end * CONVERGED <= statistics.median(at[:3])


@dataclass(slots=True, kw_only=True)
class AdamRate(Details):
    """Rule ``adam_lr``: an Adam-family learning rate against the weights it moves."""

    rule: str = "adam_lr"
    lr: float
    """The learning rate at its peak."""
    weight_rms: float
    """The median RMS of the weight matrices then."""
    ratio: float
    inflated: float | None = None
    """The weights' median RMS at its largest over its first sample."""


def _typical_rms(h: History) -> list[tuple[int, float]]:
    """(step, median RMS of the weight matrices) at each step their norms were sampled."""
    by_step: dict[int, list[float]] = {}
    for p in weight_params(h):
        norms, numel = h.param(p.name, "weight_norm"), numel_of(p)
        for step, norm in zip(norms.steps, norms.values) if numel else ():
            if math.isfinite(norm) and norm > 0:
                by_step.setdefault(step, []).append(norm / math.sqrt(numel))
    return [(s, statistics.median(v)) for s, v in sorted(by_step.items())]


def _allowed(h: History) -> list[Finding]:
    kind = h.meta.optimizer()
    lr = [(s, v) for s, v in zip(h.lr.steps, h.lr.values) if math.isfinite(v) and v > 0]
    if kind not in ADAM_FAMILY or not lr:
        return []
    rms = _typical_rms(h)
    if not rms:
        return []
    rate = dict(lr)
    # the rate against the weights at every sampled step, the first ones included
    ratios = [(s, rate[s], r, rate[s] / r) for s, r in rms if s in rate]
    over = [x for x in ratios if x[3] >= ADAM_LR]
    inflated = max(r for _, r in rms) / rms[0][1]
    peak_step, peak = max(lr, key=lambda sv: (sv[1], -sv[0]))
    start = rms[0][1]
    if not over and peak / start >= ADAM_LR and inflated >= INFLATED:
        # the rate far above the scale the weights were built at, which they left
        first = next(s for s, v in lr if v / start >= ADAM_LR)
        over = [(first, peak, start, peak / start)]
    if not over:
        return []
    _, peak, typical, ratio = max(over, key=lambda x: x[3])
    onset = over[0][0]
    grew = f"; they grew {fmt(inflated)}x during the run" if inflated >= INFLATED else ""
    measured = [v for series in update_ratios(h).values() for v in series.values]
    return [
        Finding(
            kind="large_updates",
            severity="warning",
            step=onset,
            layer=None,
            summary=(
                f"large updates: {kind} at learning rate {fmt(peak)} can move every weight by "
                f"~{fmt(ratio)}x its typical size in one step ({kind}'s step is about the "
                f"learning rate per element, whatever the gradient's scale; the weights' "
                f"RMS is {fmt(typical)}{grew})"
            ),
            evidence=[
                Evidence("optimizer", kind),
                Evidence("learning rate at its peak", fmt(peak), step=peak_step),
                Evidence("median RMS of the weight matrices then", fmt(typical)),
                Evidence("learning rate / weight RMS", fmt(ratio)),
                Evidence("weight RMS at its largest / at the first sample", fmt(inflated)),
            ]
            + (
                [Evidence("median measured update/weight ratio", fmt(statistics.median(measured)))]
                if measured
                else []
            ),
            details=AdamRate(lr=peak, weight_rms=typical, ratio=ratio, inflated=inflated),
        )
    ]


class LargeUpdates(FindingKind):
    """Single optimizer steps move weights by a large part of their size."""

    name = "large_updates"
    harm = (
        "An update beyond 0.3 of its weights after which the loss did not fall 10x more, or an "
        "Adam-family rate as large as the weights themselves."
    )
    caused_by = (
        "accumulating_gradients",
        "nonfinite",
        "loss_blowup",
        "exploding_gradients",
        "loss_divergence",
    )
    link = 100

    def standing(self, f: Finding) -> bool:
        """An Adam learning rate as large as the weights (rule ``adam_lr``) is a setting: it
        joins the story of what it caused."""
        return AdamRate.in_(f) is not None

    def check(self, h: History) -> list[Finding]:
        return _measured(h) or _allowed(h)

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        f.symptom = (
            f"single optimizer steps move weights by a large part of their size from {at(f)}"
        )
        lr = lr_too_high(0.3)
        grads = Hypothesis(
            Family.GRADIENTS,
            "gradients far larger than the learning rate was chosen for",
            "plot the global gradient norm at the steps of the large updates",
            base=0.1,
        )
        d = AdamRate.in_(f)
        if d is not None:  # the rate itself, against the weights it moves
            f.symptom = (
                f"the learning rate ({fmt(d.lr)}) is {fmt(d.ratio)}x the weights' typical "
                "size, so each optimizer step can rewrite them"
            )
            lr.seen(
                f"learning rate {fmt(d.lr)} against weights of RMS {fmt(d.weight_rms)}: "
                "an Adam-family step moves each weight by about the learning rate",
                Weight.DECISIVE,
            )
            grads.against("an Adam-family step does not grow with the gradient", Weight.STRONG)
        else:
            lr.seen(
                f"a step moved the weights by more than {fmt(0.3)} of their norm",
                Weight.STRONG,
                step=f.step,
            )
            if facts.grad_median and facts.grad_p99 and facts.grad_p99 > 10 * facts.grad_median:
                grads.seen(
                    f"the gradient norm's p99 ({fmt(facts.grad_p99)}) is over 10x its median",
                    Weight.WEAK,
                )
            if facts.adam:
                grads.against("an Adam-family step does not grow with the gradient", Weight.STRONG)
        f.fixes += [
            lr_fix(0.1, "lower the learning rate by 10x"),
            Fix(
                Horizon.SHORT_TERM,
                clip_advice(facts)
                if facts.clip is not None
                else "add a warm-up and gradient clipping",
            ),
        ]
        f.monitoring.append("update/weight ratio per layer (healthy ~1e-3, alert above 0.1)")
        clipping(f, lr, facts)
        return [lr, grads]
