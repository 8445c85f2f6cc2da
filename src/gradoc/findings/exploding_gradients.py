"""exploding_gradients: gradients far too large, from the start or growing during training.

Needs: per-parameter gradient and weight norms, the global gradient norm.

Two rules, so that a problem already present at step 0 is caught as well as one that
develops:

1. Scale: a weight matrix whose gradient norm exceeds ``SCALE_RATIO`` (1e3) times its
   weight norm. With any usual learning rate (1e-4..1e-1) such a step moves the weights
   by more than their own size. Healthy calibration runs (transformer with LayerNorm,
   CNN with BatchNorm, LSTM, MLPs) stay below 10; N(0, 1) initialisation of a 10-layer
   ReLU MLP gives ~1e12 at step 0.
2. Growth: the global gradient norm rises above ``GROWTH`` (100) times its early level
   (the median of its first 5% of steps, at least 5) and stays above 10 times it for
   ``SUSTAIN`` (3) steps or turns non-finite within 20 steps. The EMA z-score of ZClip
   (alpha 0.97) at the onset is given as evidence. A single high step that comes back
   is a loss spike, not an explosion (see loss_spike). On a gradient norm that is noisy
   by itself (its 95th-percentile excursion over its recent median, ``signals.excursions``,
   at least ``NOISY`` (5): the gradient of one episode of a policy gradient, 0.02 to 146
   on a healthy agent, tests/shapes/ppo_healthy.py) the growth must also hold in the
   median of the next ``HOLD`` (20) steps. A run whose every objective follows returns
   (``detect.training``: a policy gradient, an actor-critic) has a gradient that scales with
   them: its growth counts only when it turns non-finite (a one-network actor-critic whose
   episodes grew from 1-3 steps to 7, ``tests/shapes/actor_critic_one_optimizer.py``:
   125x at step 111 while the agent improved, healthy).

Harm: a gradient far beyond its weights is harm only when it lasts, grows, or the loss does not
improve. Where only the scale rule fired, at the first sampled step alone (the next sample is
back below the ratio), and the loss then improved clearly (``signals.improved``: the end at
most half the loss at that step), it is information: the initialisation's first gradient,
which the first updates corrected (a tutorial's ``nn.Linear(1, 1)`` on unnormalised prices:
6.8e7x its weights at step 0, the loss 113,000 to 500; ``tests/mechanisms/linreg_prices.py``).

The scale rule ignores a single sampled step, after ordinary ones, whose next sample is
back below the ratio: one batch whose targets were x1000 gives a gradient 1e4x its
weights for one step, and that is the batch's loss spike (tests/shapes/corrupted_batch.py).
The first sampled step is never such a spike: what is there before any update is the
initialisation's (nanoGPT with init std 1.0: 2,200 before its clip, at step 0 only).

AUTOTRAINER's first/last-layer ratio > 70 did not separate the labelled runs: an N(0, 1)
MLP has ratio 0.17 (both ends explode), so it is not used.
"""

from __future__ import annotations

import math
import statistics

from ..detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, RuledOut, Weight
from ..detect.history import History
from ..detect.signals import excursions, finite, fmt, loss_improved, median, weight_params
from ..detect.training import Training
from ..detect.zclip import WARMUP, ZClip
from .advice import (
    LR_TOO_HIGH,
    clip_fix,
    clipping,
    init_advice,
    lr_fix,
    lr_too_high,
    related,
    update_signs,
)
from .facts import Facts
from .kind import FindingKind

SCALE_RATIO = 1e3
GROWTH = 100.0
SUSTAIN = 3
NONFINITE_WITHIN = 20
NOISY = 5.0
HOLD = 20


def _ema_z(values: list[float], upto: int) -> float:
    """ZClip's z-score of values[upto]: the guard's averages fed the norms before it (the
    warm-up shortened to the first half of them in a short run)."""
    if upto < 2:
        return math.nan
    z = ZClip(warmup=max(1, min(WARMUP, upto // 2)))
    for v in values[:upto]:
        z.update(v)
    score = z.zscore(values[upto])
    return score if score is not None else math.nan


def _scale_rule(h: History) -> tuple[int, str, float, bool] | None:
    """The first step (and its parameter, its ratio) at which a weight's gradient exceeded
    ``SCALE_RATIO`` times its norm, earliest first, and whether that was the first sampled
    step alone (the next sample back below)."""
    worst: tuple[int, str, float, bool] | None = None
    for p in weight_params(h):
        w = h.param(p.name, "weight_norm")
        weights = dict(zip(w.steps, w.values))
        g = h.param(p.name, "grad_norm")
        ratios = [
            (s, gv / wv if math.isfinite(gv) else math.inf)
            for s, gv in zip(g.steps, g.values)
            if (wv := weights.get(s)) and wv > 0
        ]
        for i, (s, r) in enumerate(ratios):
            if r > SCALE_RATIO and math.isfinite(r):
                back = i + 1 < len(ratios) and ratios[i + 1][1] <= SCALE_RATIO
                if i > 0 and back:
                    continue  # one step after ordinary ones, and back: a spike
                if worst is None or (s, -r) < (worst[0], -worst[2]):
                    worst = (s, p.name, r, back)
                break
    return worst


def _returns_set_the_scale(h: History) -> bool:
    """Every objective of the run follows returns (``detect.training``): its gradient scales
    with them."""
    objectives = h.objectives
    return bool(objectives) and all(o.training is Training.REINFORCEMENT for o in objectives)


def _growth_rule(h: History) -> tuple[int, float, float] | None:
    steps, values = h.grad_norm.steps, h.grad_norm.values
    returns = _returns_set_the_scale(h)
    _, fvalues = finite(h.grad_norm)
    k = max(5, len(fvalues) // 20)
    if len(fvalues) <= k:
        return None
    base = median(fvalues[:k])
    if not base > 0:
        return None
    noisy = (excursions([v for v in fvalues if v > 0]) or 0.0) >= NOISY
    for i in range(k, len(values)):
        v = values[i]
        if not (math.isfinite(v) and v > GROWTH * base):
            continue
        after = values[i + 1 : i + SUSTAIN]
        sustained = len(after) == SUSTAIN - 1 and all(
            not math.isfinite(a) or a > 10 * base for a in after
        )
        ends_nonfinite = any(not math.isfinite(a) for a in values[i + 1 : i + 1 + NONFINITE_WITHIN])
        hold = values[i + 1 : i + 1 + HOLD]
        if noisy and sustained and len(hold) == HOLD:
            sustained = statistics.median(hold) > 10 * base
        if returns:  # growth that follows the returns is the agent learning: harm is a NaN
            sustained = False
        if sustained or ends_nonfinite:
            return steps[i], v / base, _ema_z(values, i)
    return None


def _fastest_growing(h: History, step: int) -> str | None:
    best, layer = 0.0, None
    for p in weight_params(h):
        g = h.param(p.name, "grad_norm")
        _, early = finite(g)
        now = g.at(step)
        base = median(early[:5])
        if now is not None and math.isfinite(now) and base > 0 and now / base > best:
            best, layer = now / base, p.module
    return layer


class ExplodingGradients(FindingKind):
    """Gradients far too large, from the start or growing in training."""

    name = "exploding_gradients"
    caused_by = (
        "accumulating_gradients",
        "adversarial_imbalance",
        "loss_blowup",
        "loss_unbounded",
        "poor_initialization",
    )
    link = 40

    def check(self, h: History) -> list[Finding]:
        scale = _scale_rule(h)
        growth = _growth_rule(h)
        if scale is None and growth is None:
            return []
        evidence: list[Evidence] = []
        parts = []
        step = min(s for s in (scale and scale[0], growth and growth[0]) if s is not None)
        layer = None
        if scale is not None:
            s, name, ratio, _ = scale
            layer = h.module_of(name)
            evidence.append(Evidence(f"gradient norm / weight norm of {name}", fmt(ratio), step=s))
            parts.append(f"the gradient of {name} is {fmt(ratio)}x its weights at step {s}")
        if growth is not None:
            s, factor, z = growth
            evidence.append(Evidence("global gradient norm / its early level", fmt(factor), step=s))
            evidence.append(Evidence("EMA z-score of the gradient norm at the onset", fmt(z)))
            parts.append(
                f"the global gradient norm grew {fmt(factor)}x its early level by step {s}"
            )
            if layer is None:
                layer = _fastest_growing(h, s)
        return [
            self.found(
                severity="error",
                step=step,
                layer=layer,
                summary="exploding gradients: " + "; ".join(parts),
                evidence=evidence,
            )
        ]

    harm = (
        "A gradient beyond its weights that lasts or grows, or one that turns non-finite. One "
        "at the first sampled step alone, on a run whose loss then halved, is information."
    )

    def harmless(self, f: Finding, h: History) -> str | None:
        scale = _scale_rule(h)
        if scale is None or not scale[3] or _growth_rule(h) is not None:
            return None
        better = loss_improved(h, since=scale[0])
        if better is None:
            return None
        return (
            f"only at step {scale[0]}, before the first updates corrected it; the loss then "
            f"fell from {fmt(better[0])} to {fmt(better[1])}"
        )

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        f.symptom = f"gradients far too large from step {f.step}" + (
            ", ending in NaN/Inf" if related(f, "nonfinite") else ""
        )
        init = Hypothesis(
            Family.INITIALIZATION,
            "weight initialisation too large for the depth",
            "print each layer's output std at step 0 (run.activation(name, 'std')): "
            "a healthy network keeps it near 1",
            base=0.2,
        )
        lr = lr_too_high(0.2)
        rec = Hypothesis(
            Family.ARCHITECTURE,
            "a long recurrence without gating or clipping",
            "clip the gradient norm and compare gradient norms per time step",
            base=0.05,
        )
        arch = Hypothesis(
            Family.ARCHITECTURE,
            "a deep stack without normalisation or residual connections",
            "add LayerNorm/BatchNorm between layers and compare the step-0 gradient norms",
            base=0.1,
        )
        if f.step == 0:
            init.seen(
                "the gradients are too large at step 0, before any update", Weight.STRONG, step=0
            )
            lr.against(
                "the problem is there at step 0, before the learning rate acted",
                Weight.STRONG,
                step=0,
            )
            f.ruled_out.append(
                RuledOut(
                    LR_TOO_HIGH,
                    "the gradients were already too large at step 0, before any update",
                )
            )
        else:
            if f.step is not None and f.step >= 50:
                init.against(
                    f"the first {f.step} steps trained with ordinary gradients: an initialisation "
                    "that is too large shows from step 0",
                    Weight.STRONG,
                    step=f.step,
                )
            else:
                init.unseen("gradients too large at step 0 (they became so later)")
            update_signs(lr, facts, f)
        poor = related(f, "poor_initialization")
        if poor:
            init.seen(poor.summary, Weight.STRONG, step=poor.step)
        if related(f, "loss_divergence") or related(f, "loss_blowup"):
            lr.seen("the loss rose with the gradients", Weight.WEAK)
        ungated = sorted(facts.module_types & {"RNN", "RNNCell"})
        if ungated:
            rec.seen(
                f"the model has ungated recurrent layers ({', '.join(ungated)})", Weight.MODERATE
            )
        elif facts.recurrent:
            rec.seen("the model has recurrent layers (gated)", Weight.WEAK)
        else:
            rec.against("the model has no recurrent layers", Weight.STRONG)
        if facts.normalised:
            arch.against("the model has normalisation layers", Weight.MODERATE)
        elif facts.depth >= 6:
            arch.seen(f"{facts.depth} weight layers and no normalisation layer", Weight.MODERATE)
        immediate = [clip_fix(facts)]
        if f.step != 0:  # at step 0 the learning rate has not acted yet
            lower = lr_fix(0.1, "lower the learning rate by 10x")
            # the fix of the likelier cause comes first (``gradoc run --fix`` tries it)
            immediate.insert(0 if lr.score > max(init.score, rec.score) else 1, lower)
        f.fixes += immediate
        f.fixes += [
            Fix(Horizon.SHORT_TERM, init_advice(facts)),
            Fix(
                Horizon.LONG_TERM,
                "add normalisation (LayerNorm/BatchNorm) and residual connections"
                + ("; use gated cells (LSTM/GRU) for recurrences" if facts.recurrent else ""),
            ),
        ]
        f.monitoring += [
            "global gradient norm with an alert at 10x its moving average",
            "update/weight ratio per layer (healthy ~1e-3)",
        ]
        clipping(f, lr, facts)
        return [init, lr, arch, rec]
