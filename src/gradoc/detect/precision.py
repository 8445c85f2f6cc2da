"""fp16_overflow, fp16_underflow: how the run would fare under fp16 autocast.

Needs: ``gradoc run --check amp`` / ``watch(check_amp=True)``, which records, on the
sampled steps, per module output and per gradient, the values beyond fp16's range
(|x| > 65504), those that flush to zero (0 < |x| < 2^-24), and per gradient the histogram
of binary exponents (``meta['amp']``, see ``stats/precision.py``).

Rules:
- ``fp16_overflow``: a module output with any value above 65504 (it becomes inf under
  fp16, and everything downstream NaN); the first such module in network order is the
  finding's layer, the later ones are listed. Gradients above 65504 before any scaling
  are reported the same way.
- ``fp16_underflow``: at the recommended loss scale, a gradient with more than
  ``UNDERFLOW`` (10%) of its non-zero values below 2^-24 (they become 0, and the layer
  stops learning), or a module output with more than ``FLUSH`` (25%) of its non-zero
  values flushing to zero.

The loss scale: ``torch.amp.GradScaler`` multiplies the loss (and so every gradient) by
a scale ``s``; a scale works when no gradient overflows at ``s`` with 2x headroom. The
recommendation is the largest such power of two in 2^0..2^24 (GradScaler's default start
is 2^16, and it halves on overflow), the underflow left at it, and bf16 when no scale
works (overflow at 2^0, or too much underflow at the largest safe scale) or when module
outputs overflow (bf16 has fp32's range).
"""

from __future__ import annotations

from typing import Any

from ..stats.precision import FP16_MAX
from ._util import fmt
from .finding import Evidence, Finding, Kind
from .history import History

UNDERFLOW = 0.10
FLUSH = 0.25
SCALES = list(range(0, 25))
"""log2 of the loss scales tried."""
HEADROOM = 2.0


def _underflow(exponents: dict[str, int], k: int) -> tuple[int, int]:
    """(values certainly below 2^-24 at scale 2^k, non-zero values): a value in bin e is
    < 2^e, so it underflows for sure when e + k <= -24 (a lower bound, one binade off)."""
    total = sum(exponents.values())
    low = sum(c for e, c in exponents.items() if int(e) + k <= -24)
    return low, total


def advice(amp: dict[str, Any]) -> dict[str, Any]:
    """Loss-scale table, the recommended initial scale, modules to keep in fp32, bf16 or not."""
    grads: dict[str, dict[str, Any]] = amp.get("gradients", {})
    acts: dict[str, dict[str, Any]] = amp.get("activations", {})
    top = max((g["max_abs"] for g in grads.values()), default=0.0)
    table = []
    for k in SCALES:
        low = total = 0
        for g in grads.values():
            a, b = _underflow(g["exponents"], k)
            low, total = low + a, total + b
        table.append(
            {
                "scale": 2**k,
                "overflow": top * 2**k > FP16_MAX,
                "underflow_frac": low / total if total else 0.0,
            }
        )
    safe = [row for row in table if top * row["scale"] * HEADROOM <= FP16_MAX]
    chosen = safe[-1] if safe else None
    fp32 = [name for name, a in acts.items() if a["fp16_overflow"] > 0]
    reasons = []
    if chosen is None:
        reasons.append(f"gradients reach {fmt(top)}: they overflow fp16 even unscaled")
    elif chosen["underflow_frac"] > UNDERFLOW:
        reasons.append(
            f"at the largest safe scale (2^{chosen['scale'].bit_length() - 1}) "
            f"{chosen['underflow_frac']:.1%} of gradient values still flush to zero"
        )
    if fp32:
        reasons.append(f"{len(fp32)} module output(s) exceed fp16's range")
    return {
        "max_grad": top,
        "loss_scales": table,
        "loss_scale": chosen["scale"] if chosen else None,
        "underflow_at_scale": chosen["underflow_frac"] if chosen else None,
        "fp32_modules": fp32,
        "prefer_bf16": bool(reasons),
        "why": "; ".join(reasons) or "fp16 with GradScaler fits this run's values",
    }


def _overflow(layer: str, what: str, evidence: list[Evidence]) -> Finding:
    return Finding(
        kind=Kind.FP16_OVERFLOW,
        severity="warning",
        step=None,
        layer=layer,
        summary=f"fp16 overflow: {what}",
        evidence=evidence,
    )


def check_overflow(h: History) -> list[Finding]:
    amp = h.meta.get("amp")
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
                f"({int(a['fp16_overflow'])} values on {amp['activation_steps']} sampled steps)",
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


def check_underflow(h: History) -> list[Finding]:
    amp = h.meta.get("amp")
    if not amp:
        return []
    adv = advice(amp)
    findings = []
    k = (adv["loss_scale"] or 1).bit_length() - 1
    worst = None
    for name, g in amp["gradients"].items():
        low, total = _underflow(g["exponents"], k)
        if total and low / total > UNDERFLOW and (worst is None or low / total > worst[1]):
            worst = (name, low / total)
    if worst is not None:
        findings.append(
            Finding(
                kind=Kind.FP16_UNDERFLOW,
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
            Finding(
                kind=Kind.FP16_UNDERFLOW,
                severity="warning",
                step=None,
                layer=name,
                summary=f"fp16 underflow: {share:.0%} of the outputs of {name or '(model)'} are "
                "below 2^-24 and flush to zero in fp16",
                evidence=[Evidence("share of outputs below 2^-24", share)],
            )
        )
    return findings
