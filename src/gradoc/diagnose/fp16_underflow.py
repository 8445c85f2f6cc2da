"""fp16_underflow: under fp16 a layer's values would flush to zero (``--check amp``)."""

from __future__ import annotations

from ..detect.finding import MODERATE, Family, Finding, Fix, Horizon, Hypothesis, Kind
from ..detect.history import History
from ..detect.precision import advice
from .facts import Facts

KIND = Kind.FP16_UNDERFLOW
CAUSED_BY: tuple[Kind, ...] = ()
CONSIDERS_ZERO_INIT = False


def explain(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    where = f.layer or "(model)"
    adv = advice(h.meta.get("amp") or {})
    f.symptom = f"under fp16, values of {where} would flush to zero and stop its learning"
    small = Hypothesis(
        Family.GRADIENTS,
        "gradients (or outputs) far smaller than the rest of the model: a tiny learning "
        "signal at that layer, or a very small loss",
        "print the gradient's exponent range (run.meta['amp']) and the loss value",
        base=0.3,
    )
    small.seen(f"{where}'s values fall below fp16's smallest normal ({f.summary})", MODERATE)
    scale = adv.get("loss_scale")
    f.fixes += [
        Fix(
            Horizon.IMMEDIATE,
            "use torch.amp.GradScaler"
            + (f"(init_scale={scale})" if scale else "")
            + "; or train in bf16, whose range needs no loss scaling",
        ),
        Fix(
            Horizon.SHORT_TERM,
            f"keep {where} in fp32 under autocast, or rescale the loss so that gradients sit "
            "well inside fp16's range",
        ),
    ]
    f.monitoring.append("GradScaler's scale and skipped steps per step")
    return [small]
