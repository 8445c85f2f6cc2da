"""frozen_parameters: most of the model's parameters never train."""

from __future__ import annotations

from ..detect._util import fmt
from ..detect.finding import (
    DECISIVE,
    MODERATE,
    Family,
    Finding,
    Fix,
    Horizon,
    Hypothesis,
    Kind,
)
from ..detect.history import History
from .facts import Facts

KIND = Kind.FROZEN_PARAMETERS
CAUSED_BY: tuple[Kind, ...] = ()
CONSIDERS_ZERO_INIT = False


def explain(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    d = f.details
    names = d.get("frozen") or []
    f.symptom = (
        f"{d['share']:.0%} of the model's parameters never change, so the model cannot learn "
        "with them"
    )
    off = Hypothesis(
        Family.LOOP,
        "parameters left frozen: requires_grad=False (a fine-tuning recipe applied to a model "
        "that must train), or left out of the optimizer",
        "print sum(p.numel() for p in model.parameters() if p.requires_grad) and compare with "
        "the parameters the optimizer holds",
        base=0.3,
    )
    cut = Hypothesis(
        Family.LOOP,
        "the graph cut before them: a .detach(), torch.no_grad() or .item() between those "
        "layers and the loss",
        "check that loss.grad_fn reaches the frozen layers (torch.autograd.grad(loss, p) for one)",
        base=0.1,
    )
    never = (
        f"{len(names)} tensors ({fmt(d['share'])} of the parameters) never received a "
        f"gradient, e.g. {', '.join(names[:3])}"
    )
    off.seen(never, DECISIVE)
    cut.seen(never, MODERATE)
    if d.get("stalled"):
        off.seen(f"the loss improved only {d['gain']:.1%} over the run", MODERATE)
    f.fixes += [
        Fix(
            Horizon.IMMEDIATE,
            "unfreeze what must train: for p in model.parameters(): p.requires_grad_(True), "
            "and give the optimizer model.parameters()",
        ),
        Fix(
            Horizon.LONG_TERM,
            "log the trainable parameter count at start-up and assert it in a test",
        ),
    ]
    f.monitoring.append("trainable parameter count, and the share of parameters updated per step")
    return [off, cut]
