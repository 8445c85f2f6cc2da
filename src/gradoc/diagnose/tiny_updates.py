"""tiny_updates: the optimizer steps do not change the weights."""

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
)
from ..detect.history import History
from .advice import lr_fix, related
from .facts import Facts

KIND = Kind.TINY_UPDATES
CAUSED_BY = (Kind.NONFINITE, Kind.VANISHING_GRADIENTS, Kind.DEAD_UNITS)
CONSIDERS_ZERO_INIT = True


def explain(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
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
            lr.seen(f"learning rate {fmt(facts.lr)}", STRONG)
        else:
            lr.against(f"learning rate {fmt(facts.lr)}", MODERATE)
    else:
        lr.unseen("the learning rate (not recorded)")
    if related(f, Kind.VANISHING_GRADIENTS) or related(f, Kind.DEAD_UNITS):
        grad.seen("gradients vanish or units are dead in this run", STRONG)
    f.fixes += [
        lr_fix(10.0, "check the learning rate and the scheduler; raise it (10x to start)"),
        Fix(Horizon.SHORT_TERM, "make sure the layers meant to train are not frozen or detached"),
    ]
    f.monitoring += [
        "learning rate per param group",
        "update/weight ratio per layer (alert below 1e-8)",
    ]
    return [lr, grad]
