"""accumulating_gradients: each step's gradient is the running sum of the earlier ones."""

from __future__ import annotations

from ..detect._util import fmt
from ..detect.finding import (
    DECISIVE,
    MODERATE,
    STRONG,
    Family,
    Finding,
    Fix,
    Horizon,
    Hypothesis,
    Kind,
)
from ..detect.history import History
from .advice import lr_too_high
from .facts import Facts

KIND = Kind.ACCUMULATING_GRADIENTS
CAUSED_BY: tuple[Kind, ...] = ()
CONSIDERS_ZERO_INIT = False


def explain(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    d = f.details
    f.symptom = (
        "the gradient the optimizer applies grows step after step: gradients are added up "
        "across steps instead of cleared"
    )
    loop = Hypothesis(
        Family.LOOP,
        "optimizer.zero_grad() missing from the training loop (or called once, outside it): "
        "backward() adds each step's gradient to the ones before",
        "print a parameter's p.grad.norm() right before loss.backward(): it should be 0 (or "
        "p.grad None) at every step",
        base=0.3,
    )
    lr = lr_too_high(0.1)
    loop.seen(
        f"on {d['kept']} of {d['checked']} steps the .grad the optimizer applied was the "
        "same tensor as the step before, changed only by that step's backward()",
        DECISIVE,
        step=d.get("first_kept"),
    )
    if d.get("growth") is not None:
        loop.seen(
            f"the gradient norm grew {fmt(d['growth'])}x by step {d['growth_step']}: a running "
            "sum of similar gradients grows with the steps",
            MODERATE,
            step=d["growth_step"],
        )
    lr.against(
        "the gradients were never cleared: whatever the rate, each update applies the sum of "
        "all the gradients so far",
        STRONG,
    )
    f.fixes += [
        Fix(
            Horizon.IMMEDIATE,
            "call optimizer.zero_grad(set_to_none=True) once per step, before loss.backward() "
            "(with gradient accumulation: after each optimizer.step())",
        ),
        Fix(
            Horizon.LONG_TERM,
            "test the training step: after optimizer.step() and zero_grad(), every p.grad is "
            "None or zero",
        ),
    ]
    f.monitoring.append("the global gradient norm per step (a steady climb from step 0 is a sum)")
    return [loop, lr]
