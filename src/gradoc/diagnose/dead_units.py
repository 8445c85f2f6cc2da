"""dead_units: most units of a ReLU layer output 0 for every input.

Two causes claim different times: an initialisation (a negative bias) kills units before
any update, a learning rate kills them with a jump. Each claim is checked against the
samples of that time (the detector's ``first_sample``, ``alive_until``)."""

from __future__ import annotations

from ..detect._util import fmt
from ..detect.finding import (
    MODERATE,
    STRONG,
    Family,
    Finding,
    Fix,
    Horizon,
    Hypothesis,
    Kind,
    RuledOut,
)
from ..detect.history import History
from .advice import LR_TOO_HIGH, grad_jump, loss_jump, lr_fix, update_signs
from .facts import Facts

KIND = Kind.DEAD_UNITS
CAUSED_BY = (
    Kind.ACCUMULATING_GRADIENTS,
    Kind.LOSS_BLOWUP,
    Kind.EXPLODING_GRADIENTS,
    Kind.LOSS_DIVERGENCE,
)
CONSIDERS_ZERO_INIT = True


def explain(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = f"most units of {f.layer} output 0 for every input, so they never learn"
    bias = Hypothesis(
        Family.INITIALIZATION,
        "a negative bias or initialisation that puts units below zero from the start",
        "print the layer's bias and pre-activation mean at step 0",
        base=0.2,
    )
    lr = Hypothesis(
        Family.LEARNING_RATE,
        "a learning rate high enough to knock units into the dead zone",
        "re-run with a lower learning rate and watch the dead share over time",
        base=0.15,
    )
    first = f.details.get("first_sample")
    alive = f.details.get("alive_until")
    if f.step == 0:
        bias.seen(
            "the units were dead at the first sample (step 0), before training moved them",
            STRONG,
            step=0,
        )
        lr.against("the units were dead before any update", STRONG, step=0)
        f.ruled_out.append(
            RuledOut(
                LR_TOO_HIGH,
                "the units were already dead at step 0, before any update",
            )
        )
    elif alive is not None:
        bias.against(
            f"the units were alive at step {alive} and dead from step {f.step}: they died "
            "in training",
            STRONG,
            step=alive,
        )
    else:
        bias.unseen(
            f"the units at step 0 (the first activation sample is at step {first})", step=first
        )
    if f.step != 0:
        jump = grad_jump(h, f.step, facts)
        rise = loss_jump(h, f.step)
        if jump is not None:
            lr.seen(
                f"the gradient norm jumped {fmt(jump[1])}x its median at step {jump[0]}, before "
                f"the units were found dead at step {f.step}",
                STRONG,
                step=jump[0],
            )
        if rise is not None:
            lr.seen(
                f"the loss rose {fmt(rise[1])}x its first value by step {rise[0]}, before the "
                "units were found dead",
                MODERATE,
                step=rise[0],
            )
        if jump is None and rise is None:
            lr.against(
                f"neither the loss nor the gradient norm jumped before step {f.step}", MODERATE
            )
        update_signs(lr, facts, f)
    f.fixes += [
        Fix(
            Horizon.IMMEDIATE,
            "re-initialise the biases of the layer before it to 0 (or a small positive value "
            "such as 0.01)",
        ),
        Fix(Horizon.SHORT_TERM, "use LeakyReLU/GELU, or put BatchNorm/LayerNorm before the ReLU"),
        Fix(
            Horizon.LONG_TERM,
            "monitor the dead share per layer and lower the learning rate if it grows during "
            "training",
        ),
    ]
    if lr.score > bias.score:
        f.fixes.insert(0, lr_fix(0.1, "lower the learning rate by 10x"))
    f.monitoring.append("share of units active on < 1% of inputs, per ReLU layer")
    return [bias, lr]
