"""fp16_overflow: under fp16 autocast a layer would produce inf (``--check amp``)."""

from __future__ import annotations

from ..detect.finding import (
    MODERATE,
    WEAK,
    Evidence,
    Family,
    Finding,
    Fix,
    Horizon,
    Hypothesis,
    Kind,
)
from ..detect.history import History
from ..detect.precision import advice
from .facts import Facts

KIND = Kind.FP16_OVERFLOW
CAUSED_BY: tuple[Kind, ...] = ()
CONSIDERS_ZERO_INIT = False


def explain(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    where = f.layer or "(model)"
    f.symptom = f"under fp16 autocast, {where} would produce inf (and NaN downstream)"
    reduce = Hypothesis(
        Family.PRECISION,
        "an unscaled reduction (a sum over a long sequence or many features) or unnormalised "
        "inputs grow the values past fp16's 65504",
        f"print {where}'s output max |x| for long and short inputs: it grows with the length",
        base=0.3,
    )
    big = Hypothesis(
        Family.PRECISION,
        "weights or inputs at a scale that fp32 tolerates but fp16 does not",
        "compare the input scale and the layer's weight norm with a normalised baseline",
        base=0.2,
    )
    claim = f"{where}'s outputs under fp16 exceed 65504 ({f.summary})"
    reduce.seen(claim, MODERATE)
    big.seen(claim, WEAK)
    adv = advice(h.meta.get("amp") or {})
    f.fixes += [
        Fix(
            Horizon.IMMEDIATE,
            f"keep {where} in fp32: run it under torch.autocast(device_type, enabled=False) on "
            ".float() inputs, or train in bf16 (fp32's range)",
        ),
        Fix(
            Horizon.SHORT_TERM,
            f"rescale {where}: a mean instead of a sum (divide by the length), 1/sqrt(d) "
            "scaling, or a normalisation layer before it",
        ),
        Fix(
            Horizon.LONG_TERM,
            "prefer bf16 autocast where the hardware has it; keep a readiness check (gradoc "
            "run --check amp) in CI for model changes",
        ),
    ]
    f.monitoring.append(f"max |output| of {where} per step, alert above 3e4 (half of fp16's max)")
    if adv.get("prefer_bf16"):
        f.evidence.append(Evidence("recommendation", f"bf16 ({adv['why']})"))
    return [reduce, big]
