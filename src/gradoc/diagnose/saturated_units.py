"""saturated_units: sigmoid/tanh outputs at the flat ends, passing no gradient."""

from __future__ import annotations

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
from .advice import init_advice, loss_jump
from .facts import Facts

KIND = Kind.SATURATED_UNITS
CAUSED_BY = (
    Kind.LOSS_BLOWUP,
    Kind.LOSS_DIVERGENCE,
    Kind.EXPLODING_GRADIENTS,
    Kind.POOR_INITIALIZATION,
)
CONSIDERS_ZERO_INIT = True


def explain(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = (
        f"the outputs of {f.layer} sit at the flat ends of the activation, passing no gradient"
    )
    init = Hypothesis(
        Family.INITIALIZATION,
        "pre-activations too large because of the initialisation scale",
        "print the std of the layer feeding it at step 0: above ~2 saturates tanh",
        base=0.2,
    )
    inputs = Hypothesis(
        Family.DATA,
        "unnormalised inputs",
        "print the mean and std of a batch of inputs",
        base=0.15,
    )
    if f.step == 0:
        init.seen("saturated at the first sample (step 0)", STRONG, step=0)
        inputs.seen("saturated at the first sample, on the inputs as given", MODERATE, step=0)
    else:
        init.unseen("saturation at step 0 (it was found later)")
        if (rise := loss_jump(h, f.step)) is not None:
            init.against(
                f"the loss rose {rise[1]:.3g}x by step {rise[0]} before: training drove it there",
                MODERATE,
            )
    f.fixes += [
        Fix(Horizon.IMMEDIATE, init_advice(facts)),
        Fix(
            Horizon.SHORT_TERM,
            "normalise the inputs and add LayerNorm/BatchNorm before the activation",
        ),
        Fix(
            Horizon.LONG_TERM,
            "prefer ReLU/GELU hidden activations; keep sigmoid for gates and outputs",
        ),
    ]
    f.monitoring.append("saturated fraction of sigmoid/tanh outputs (alert above 50%)")
    return [init, inputs]
