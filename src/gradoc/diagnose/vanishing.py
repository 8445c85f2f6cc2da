"""vanishing_gradients: the input-side layers get almost no gradient."""

from __future__ import annotations

import math
import statistics

from ..detect import vanishing
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
from .advice import init_advice, related
from .facts import Facts

KIND = Kind.VANISHING_GRADIENTS
CAUSED_BY = (Kind.DEAD_UNITS, Kind.SATURATED_UNITS, Kind.LOSS_BLOWUP, Kind.LOSS_DIVERGENCE)
CONSIDERS_ZERO_INIT = True


def explain(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = "the input-side layers get almost no gradient, so they barely learn"
    sat = Hypothesis(
        Family.ARCHITECTURE,
        "saturating activations (sigmoid/tanh) repeated through depth",
        "swap the activation for ReLU/GELU and compare the first layer's gradient norm",
        base=0.2,
    )
    init = Hypothesis(
        Family.INITIALIZATION,
        "initialisation too small for the depth",
        "print each layer's output std at step 0: it should not shrink layer after layer",
        base=0.15,
    )
    dead = Hypothesis(
        Family.GRADIENTS,
        "dead ReLU units blocking the gradient",
        "look at the per-unit activity of the ReLU layers (run.unit_active)",
        base=0.1,
    )
    if facts.saturating:
        sat.seen(
            f"the model uses {', '.join(facts.saturating)} across {facts.depth} layers", MODERATE
        )
        sigmoids = sum(1 for m in h.modules if m.type == "Sigmoid")
        if sigmoids >= 3:
            sat.seen(
                f"sigmoid's derivative is at most 0.25: {sigmoids} sigmoid layers scale the "
                f"gradient by at most 0.25^{sigmoids} = {fmt(0.25**sigmoids)}",
                STRONG,
            )
    else:
        sat.against("the model has no sigmoid/tanh-family module", STRONG)
    if (poor := related(f, Kind.POOR_INITIALIZATION)) is not None:
        init.seen(str(poor["summary"]), STRONG, step=poor.get("step"))
    _weight_gain(init, facts)
    if (dying := related(f, Kind.DEAD_UNITS)) is not None:
        dead.seen(str(dying["summary"]), STRONG, step=dying.get("step"))
    elif facts.relu_like:
        dead.against("no ReLU layer has a majority of dead units", MODERATE)
    else:
        dead.against("the model has no ReLU-family module", STRONG)
    last = [p for p in h.params if p.shape and len(p.shape) >= 2]
    if last:
        g = h.param(last[-1].name, "grad_norm").values
        if g and math.isfinite(g[-1]) and g[-1] > 1e-4:
            f.ruled_out.append(
                RuledOut(
                    "a data or loss problem (nothing to learn)",
                    f"the output layer {last[-1].name} still gets gradient norm {fmt(g[-1])}: "
                    "the signal is lost on the way down",
                )
            )
    if facts.lr is not None:
        f.ruled_out.append(
            RuledOut(
                "learning rate too low",
                f"the learning rate is {fmt(facts.lr)} and the output side learns; a higher "
                "rate would not reach layers whose gradient is ~0",
            )
        )
    # the fix of the likelier cause comes first; an activation swap only where the model
    # has saturating activations to swap
    first, then = init_advice(facts), None
    if facts.saturating:
        swap = (
            f"switch the hidden {'/'.join(facts.saturating)} activations to ReLU or GELU "
            "(keep sigmoid for gates and outputs)"
        )
        first, then = (swap, first) if sat.score >= init.score else (first, swap)
    f.fixes.append(Fix(Horizon.IMMEDIATE, first))
    if then:
        f.fixes.append(Fix(Horizon.SHORT_TERM, then))
    f.fixes.append(
        Fix(
            Horizon.LONG_TERM,
            "add normalisation and residual connections so gradient has a short path to "
            "the input layers",
        )
    )
    f.monitoring.append(
        "gradient norm of the first and last layer, and their ratio (alert below 1e-3)"
    )
    return [sat, init, dead]


def _weight_gain(init: Hypothesis, facts: Facts) -> None:
    """Whether the weights' own scale at the start explains a gradient lost through depth:
    each matrix scales the gradient passing back through it by ``||W|| / sqrt(fan-in)``;
    a variance-preserving initialisation makes that 1 (sqrt(2) in front of a ReLU, which
    halves the variance). Seen when the product alone falls below the detector's ratio;
    contradicted when it loses less than 10x."""
    gains = facts.weight_gains or []
    if len(gains) < vanishing.MIN_LAYERS:
        init.unseen("the weights' scale at the start (too few weight matrices recorded)")
        return
    g = statistics.median(gains)
    keep, relu = (math.sqrt(2), " for ReLU layers") if facts.relu_like else (1.0, "")
    depth = len(gains) - 1  # the matrices between the last layer's gradient and the first's
    product = (g / keep) ** depth
    scale = (
        f"at the start each weight matrix scales the gradient passing back through it by "
        f"~{fmt(g)}, the median of ||W||/sqrt(fan-in), where {fmt(keep)} keeps it{relu}"
    )
    if product < vanishing.RATIO:
        init.seen(
            f"{scale}; across {depth} matrices that is {fmt(g / keep)}^{depth} = "
            f"{fmt(product)}, enough by itself to lose the gradient",
            STRONG,
            step=0,
        )
    elif product >= 0.1:
        init.against(f"{scale}; across {depth} matrices it loses at most 10x", STRONG, step=0)
    else:
        init.unseen(f"{scale}; across {depth} matrices {fmt(product)}", step=0)
