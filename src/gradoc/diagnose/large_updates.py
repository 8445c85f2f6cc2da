"""large_updates: single optimizer steps move weights by a large part of their size."""

from __future__ import annotations

from ..detect._util import fmt
from ..detect.finding import (
    DECISIVE,
    STRONG,
    WEAK,
    Family,
    Finding,
    Fix,
    Horizon,
    Hypothesis,
    Kind,
)
from ..detect.history import History
from .advice import at, clip_advice, clipping, lr_fix, lr_too_high
from .facts import Facts

KIND = Kind.LARGE_UPDATES
CAUSED_BY = (
    Kind.ACCUMULATING_GRADIENTS,
    Kind.NONFINITE,
    Kind.LOSS_BLOWUP,
    Kind.EXPLODING_GRADIENTS,
    Kind.LOSS_DIVERGENCE,
)
CONSIDERS_ZERO_INIT = False


def explain(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = f"single optimizer steps move weights by a large part of their size from {at(f)}"
    lr = lr_too_high(0.3)
    grads = Hypothesis(
        Family.GRADIENTS,
        "gradients far larger than the learning rate was chosen for",
        "plot the global gradient norm at the steps of the large updates",
        base=0.1,
    )
    d = f.details
    if d.get("rule") == "adam_lr":  # the rate itself, against the weights it moves
        f.symptom = (
            f"the learning rate ({fmt(d['lr'])}) is {fmt(d['ratio'])}x the weights' typical "
            "size, so each optimizer step can rewrite them"
        )
        lr.seen(
            f"learning rate {fmt(d['lr'])} against weights of RMS {fmt(d['weight_rms'])}: "
            "an Adam-family step moves each weight by about the learning rate",
            DECISIVE,
        )
        grads.against("an Adam-family step does not grow with the gradient", STRONG)
    else:
        lr.seen(
            f"a step moved the weights by more than {fmt(0.3)} of their norm", STRONG, step=f.step
        )
        if facts.grad_median and facts.grad_p99 and facts.grad_p99 > 10 * facts.grad_median:
            grads.seen(
                f"the gradient norm's p99 ({fmt(facts.grad_p99)}) is over 10x its median", WEAK
            )
        if facts.adam:
            grads.against("an Adam-family step does not grow with the gradient", STRONG)
    f.fixes += [
        lr_fix(0.1, "lower the learning rate by 10x"),
        Fix(
            Horizon.SHORT_TERM,
            clip_advice(facts) if facts.clip is not None else "add a warm-up and gradient clipping",
        ),
    ]
    f.monitoring.append("update/weight ratio per layer (healthy ~1e-3, alert above 0.1)")
    clipping(f, lr, facts)
    return [lr, grads]
