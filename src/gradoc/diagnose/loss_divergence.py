"""loss_divergence: the loss climbs and does not come back."""

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
from .advice import at, clip_advice, clipping, grad_jump, lr_fix, lr_too_high, related, update_signs
from .facts import Facts

KIND = Kind.LOSS_DIVERGENCE
CAUSED_BY = (
    Kind.ACCUMULATING_GRADIENTS,
    Kind.NONFINITE,
    Kind.LOSS_BLOWUP,
    Kind.EXPLODING_GRADIENTS,
)
CONSIDERS_ZERO_INIT = False


def explain(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = f"the loss climbs from {at(f)} and does not come back"
    lr = lr_too_high(0.3)
    grad = Hypothesis(
        Family.GRADIENTS,
        "exploding gradients",
        "plot the global gradient norm around the onset",
        base=0.1,
    )
    update_signs(lr, facts, f)
    if (large := related(f, Kind.LARGE_UPDATES)) is not None:
        lr.seen(str(large["summary"]), STRONG, step=large.get("step"))
    if h.lr.values and len(h.lr.values) > 1 and max(h.lr.values) > 1.5 * h.lr.values[0]:
        lr.seen(
            f"the learning rate rose {max(h.lr.values) / h.lr.values[0]:.3g}x during the run",
            MODERATE,
        )
    jump = grad_jump(h, None if f.step is None else f.step + 5, facts)
    if jump is not None:
        rise = f"the gradient norm rose {fmt(jump[1])}x its median by step {jump[0]}"
        grad.seen(rise, MODERATE, step=jump[0])
        if jump[0] > 0 and h.grad_norm.steps and h.grad_norm.steps[0] == 0:
            # ordinary before any update, too large once updates began: the updates did it
            lr.seen(f"{rise}, after the updates began (step 0: ordinary)", MODERATE, step=jump[0])
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
        Fix(Horizon.SHORT_TERM, "add a warm-up and " + clip_advice(facts)),
        Fix(Horizon.LONG_TERM, "choose the learning rate with a range test; decay it"),
    ]
    f.monitoring.append("smoothed loss against its best so far (alert at 2x)")
    clipping(f, lr, facts)
    return [lr, grad]
