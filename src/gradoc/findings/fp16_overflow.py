"""fp16_overflow: how the run would fare under fp16 autocast: values past its range.

Needs: ``gradoc run --check amp`` / ``watch(check_amp=True)``, which records, on the
sampled steps, per module output and per gradient, the values beyond fp16's range
(|x| > 65504) (``meta['amp']``, see ``stats/precision.py``).

Rule: a module output with any value above 65504 (it becomes inf under fp16, and
everything downstream NaN); the first such module in network order is the finding's layer,
the later ones are listed. Gradients above 65504 before any scaling are reported the same
way. The loss scale the report recommends: ``gradoc.detect.precision``.
"""

from __future__ import annotations

from ..detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, Weight
from ..detect.history import History
from ..detect.precision import advice
from ..detect.signals import fmt
from .facts import Facts
from .kind import FindingKind


def _overflow(layer: str, what: str, evidence: list[Evidence]) -> Finding:
    return Finding(
        kind="fp16_overflow",
        severity="warning",
        step=None,
        layer=layer,
        summary=f"fp16 overflow: {what}",
        evidence=evidence,
    )


class Fp16Overflow(FindingKind):
    """Under fp16 autocast a layer would produce inf (``--check amp``)."""

    name = "fp16_overflow"
    harm = (
        "The mechanism itself: a value past fp16's range (65504) in an output or a gradient on "
        "a sampled step, which under fp16 becomes inf, and what follows NaN."
    )

    def check(self, h: History) -> list[Finding]:
        amp = h.meta.amp
        if not amp:
            return []
        order = {m.name: i for i, m in enumerate(h.modules)}
        names = {n for n, a in amp["activations"].items() if a["fp16_overflow"] > 0}

        def inner(name: str) -> bool:  # no overflowing submodule: the overflow starts here
            prefix = f"{name}." if name else ""
            return not any(o != name and o.startswith(prefix) for o in names)

        over = sorted(
            ((name, amp["activations"][name]) for name in names),
            key=lambda na: (not inner(na[0]), order.get(na[0], 1 << 30)),
        )
        findings = []
        if over:
            name, a = over[0]
            later = [n for n, _ in over[1:6]]
            findings.append(
                _overflow(
                    name,
                    f"outputs of {name or '(model)'} reach {fmt(a['max_abs'])}, above fp16's 65504 "
                    f"({int(a['fp16_overflow'])} values on {amp['activation_steps']} sampled "
                    "steps)",
                    [
                        Evidence("largest |output|", a["max_abs"]),
                        Evidence("values above 65504", int(a["fp16_overflow"])),
                        Evidence("share of the outputs", a["fp16_overflow"] / a["numel"]),
                        Evidence("bf16 overflow", int(a["bf16_overflow"])),
                    ]
                    + ([Evidence("later modules that overflow too", later)] if later else []),
                )
            )
        grads = sorted(
            ((n, g) for n, g in amp["gradients"].items() if g["fp16_overflow"] > 0),
            key=lambda ng: -ng[1]["max_abs"],
        )
        if grads:
            name, g = grads[0]
            findings.append(
                _overflow(
                    name,
                    f"the gradient of {name} reaches {fmt(g['max_abs'])} before any loss scaling",
                    [Evidence("largest |gradient|", g["max_abs"])],
                )
            )
        return findings

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
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
        reduce.seen(claim, Weight.MODERATE)
        big.seen(claim, Weight.WEAK)
        adv = advice(h.meta.amp or {})
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
        f.monitoring.append(
            f"max |output| of {where} per step, alert above 3e4 (half of fp16's max)"
        )
        if adv.prefer_bf16:
            f.evidence.append(Evidence("recommendation", f"bf16 ({adv.why})"))
        return [reduce, big]
