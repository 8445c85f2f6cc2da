"""How a run's values would fare under fp16: the loss scale to start GradScaler at.

Needs: ``gradoc run --check amp`` / ``watch(check_amp=True)`` (``meta['amp']``, see
``stats/precision.py``); the findings it backs are ``fp16_overflow`` and ``fp16_underflow``
(``gradoc.findings``).

The loss scale: ``torch.amp.GradScaler`` multiplies the loss (and so every gradient) by
a scale ``s``; a scale works when no gradient overflows at ``s`` with 2x headroom. The
recommendation is the largest such power of two in 2^0..2^24 (GradScaler's default start
is 2^16, and it halves on overflow), the underflow left at it, and bf16 when no scale
works (overflow at 2^0, or too much underflow at the largest safe scale) or when module
outputs overflow (bf16 has fp32's range).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from .._util.json_types import JsonObject
from ..stats.precision import FP16_MAX
from .signals import fmt

UNDERFLOW = 0.10
SCALES = list(range(0, 25))
"""log2 of the loss scales tried."""
HEADROOM = 2.0


def underflow(exponents: dict[str, int], k: int) -> tuple[int, int]:
    """(values certainly below 2^-24 at scale 2^k, non-zero values): a value in bin e is
    < 2^e, so it underflows for sure when e + k <= -24 (a lower bound, one binade off)."""
    total = sum(exponents.values())
    low = sum(c for e, c in exponents.items() if int(e) + k <= -24)
    return low, total


@dataclass(frozen=True, slots=True)
class ScaleRow:
    """One loss scale tried: would the largest gradient overflow, what share flushes to 0."""

    scale: int
    overflow: bool
    underflow_frac: float

    def to_json(self) -> JsonObject:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class AmpAdvice:
    """The mixed-precision readiness of a run (report.json's ``amp``)."""

    sampled_steps: int | None
    """Steps whose values were sampled (``--check amp`` samples activations)."""
    max_grad: float
    loss_scales: list[ScaleRow]
    loss_scale: int | None
    """The recommended initial scale: the largest that leaves 2x headroom (None: none)."""
    underflow_at_scale: float | None
    fp32_modules: list[str]
    """Modules whose outputs exceed fp16's range: keep them in fp32."""
    prefer_bf16: bool
    why: str

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AmpAdvice:
        return cls(
            sampled_steps=data.get("sampled_steps"),
            max_grad=data["max_grad"],
            loss_scales=[ScaleRow(**row) for row in data.get("loss_scales", [])],
            loss_scale=data.get("loss_scale"),
            underflow_at_scale=data.get("underflow_at_scale"),
            fp32_modules=list(data.get("fp32_modules", [])),
            prefer_bf16=bool(data.get("prefer_bf16")),
            why=data.get("why", ""),
        )


def advice(amp: Mapping[str, Any]) -> AmpAdvice:
    """Loss-scale table, the recommended initial scale, modules to keep in fp32, bf16 or not
    (``amp``: the run's ``meta['amp']``)."""
    grads: dict[str, JsonObject] = amp.get("gradients", {})
    acts: dict[str, JsonObject] = amp.get("activations", {})
    top = max((g["max_abs"] for g in grads.values()), default=0.0)
    table = []
    for k in SCALES:
        low = total = 0
        for g in grads.values():
            a, b = underflow(g["exponents"], k)
            low, total = low + a, total + b
        table.append(ScaleRow(2**k, top * 2**k > FP16_MAX, low / total if total else 0.0))
    safe = [row for row in table if top * row.scale * HEADROOM <= FP16_MAX]
    chosen = safe[-1] if safe else None
    fp32 = [name for name, a in acts.items() if a["fp16_overflow"] > 0]
    reasons = []
    if chosen is None:
        reasons.append(f"gradients reach {fmt(top)}: they overflow fp16 even unscaled")
    elif chosen.underflow_frac > UNDERFLOW:
        reasons.append(
            f"at the largest safe scale (2^{chosen.scale.bit_length() - 1}) "
            f"{chosen.underflow_frac:.1%} of gradient values still flush to zero"
        )
    if fp32:
        reasons.append(f"{len(fp32)} module output(s) exceed fp16's range")
    return AmpAdvice(
        sampled_steps=amp.get("activation_steps"),
        max_grad=top,
        loss_scales=table,
        loss_scale=chosen.scale if chosen else None,
        underflow_at_scale=chosen.underflow_frac if chosen else None,
        fp32_modules=fp32,
        prefer_bf16=bool(reasons),
        why="; ".join(reasons) or "fp16 with GradScaler fits this run's values",
    )
