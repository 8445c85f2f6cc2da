"""fp16_underflow: how the run would fare under fp16 autocast: values that flush to zero.

Needs: ``gradoc run --check amp`` / ``watch(check_amp=True)``, which records, on the
sampled steps, per module output and per gradient, the values that flush to zero
(0 < |x| < 2^-24), and per gradient the histogram of binary exponents (``meta['amp']``,
see ``stats/precision.py``).

Rule: at the recommended loss scale (``gradoc.detect.precision``), a gradient with more
than ``UNDERFLOW`` (10%) of its non-zero values below 2^-24 (they become 0, and the layer
stops learning), or a module output with more than ``FLUSH`` (25%) of its non-zero values
flushing to zero.
"""

from __future__ import annotations

from ..detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, Weight
from ..detect.history import History
from ..detect.precision import UNDERFLOW, advice, underflow
from .facts import Facts
from .kind import FindingKind

FLUSH = 0.25


class Fp16Underflow(FindingKind):
    """Under fp16 a layer's values would flush to zero (``--check amp``)."""

    name = "fp16_underflow"
    harm = (
        "The mechanism itself: at the recommended loss scale, more than 10% of a gradient's "
        "non-zero values (25% of an output's) would flush to zero under fp16."
    )

    def check(self, h: History) -> list[Finding]:
        amp = h.meta.amp
        if not amp:
            return []
        adv = advice(amp)
        findings = []
        k = (adv.loss_scale or 1).bit_length() - 1
        worst = None
        for name, g in amp["gradients"].items():
            low, total = underflow(g["exponents"], k)
            if total and low / total > UNDERFLOW and (worst is None or low / total > worst[1]):
                worst = (name, low / total)
        if worst is not None:
            findings.append(
                self.found(
                    severity="warning",
                    step=None,
                    layer=worst[0],
                    summary=f"fp16 underflow: {worst[1]:.0%} of the gradient of {worst[0]} flushes "
                    f"to zero in fp16 even at loss scale 2^{k}",
                    evidence=[
                        Evidence("loss scale", 2**k),
                        Evidence("share of values below 2^-24 at that scale", worst[1]),
                    ],
                )
            )
        acts = [
            (n, a["fp16_flush"] / max(1.0, a["numel"]))
            for n, a in amp["activations"].items()
            if a["fp16_flush"] / max(1.0, a["numel"]) > FLUSH
        ]
        if acts:
            name, share = max(acts, key=lambda x: x[1])
            findings.append(
                self.found(
                    severity="warning",
                    step=None,
                    layer=name,
                    summary=f"fp16 underflow: {share:.0%} of the outputs of {name or '(model)'} "
                    "are "
                    "below 2^-24 and flush to zero in fp16",
                    evidence=[Evidence("share of outputs below 2^-24", share)],
                )
            )
        return findings

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        where = f.layer or "(model)"
        adv = advice(h.meta.amp or {})
        f.symptom = f"under fp16, values of {where} would flush to zero and stop its learning"
        small = Hypothesis(
            Family.GRADIENTS,
            "gradients (or outputs) far smaller than the rest of the model: a tiny learning "
            "signal at that layer, or a very small loss",
            "print the gradient's exponent range (run.meta['amp']) and the loss value",
            base=0.3,
        )
        small.seen(
            f"{where}'s values fall below fp16's smallest normal ({f.summary})", Weight.MODERATE
        )
        scale = adv.loss_scale
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
