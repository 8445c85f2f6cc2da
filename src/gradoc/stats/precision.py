"""How values would fare in fp16 and bf16: range counts and exponent histograms.

fp16 (IEEE half): largest finite 65504; smallest normal 2^-14; smallest subnormal 2^-24,
below which a value flushes to zero. bf16: largest finite ~3.39e38; smallest normal 2^-126;
smallest subnormal 2^-133. A value with 2^-24 <= |x| < 2^-14 survives fp16 as a
subnormal with fewer mantissa bits ("loses precision").

``range_counts`` returns, for one tensor, the counts a readiness check needs as one small
float64 vector (device-side, no host sync); ``exponent_histogram`` the binary exponents of
a gradient's values, from which the underflow of every loss scale follows.
"""

from __future__ import annotations

import torch
from torch import Tensor

FP16_MAX = 65504.0
FP16_NORMAL = 2.0**-14
FP16_TINY = 2.0**-24
BF16_MAX = float(torch.finfo(torch.bfloat16).max)
BF16_NORMAL = 2.0**-126
BF16_TINY = 2.0**-133

RANGE_FIELDS = (
    "numel",
    "fp16_overflow",
    "fp16_flush",
    "fp16_subnormal",
    "bf16_overflow",
    "bf16_flush",
    "bf16_subnormal",
    "max_abs",
)
"""The entries of :func:`range_counts`, in order."""

EXP_MIN, EXP_MAX = -160, 140
"""Binary exponents kept by :func:`exponent_histogram` (fp32's range, with room)."""
BINS = EXP_MAX - EXP_MIN + 1


def range_counts(x: Tensor) -> Tensor:
    """``RANGE_FIELDS`` of ``x``'s finite values (float64; ``max_abs`` is a max, the rest sum)."""
    a = x.detach().abs().double()
    a = torch.where(torch.isfinite(a), a, torch.zeros_like(a))
    nonzero = a > 0
    return torch.stack(
        [
            torch.tensor(float(a.numel()), dtype=torch.float64, device=a.device),
            (a > FP16_MAX).sum().double(),
            (nonzero & (a < FP16_TINY)).sum().double(),
            ((a >= FP16_TINY) & (a < FP16_NORMAL)).sum().double(),
            (a > BF16_MAX).sum().double(),
            (nonzero & (a < BF16_TINY)).sum().double(),
            ((a >= BF16_TINY) & (a < BF16_NORMAL)).sum().double(),
            a.max() if a.numel() else torch.zeros((), dtype=torch.float64, device=a.device),
        ]
    )


def merge_counts(total: Tensor | None, new: Tensor) -> Tensor:
    """Sum two ``range_counts`` vectors (``max_abs`` takes the max)."""
    if total is None:
        return new.clone()
    out = total + new
    out[-1] = torch.maximum(total[-1], new[-1])
    return out


def exponent_histogram(g: Tensor) -> Tensor:
    """Counts of the non-zero finite values of ``g`` by binary exponent ``e`` (|v| in
    [2^(e-1), 2^e)), for e in [EXP_MIN, EXP_MAX]; float64, length ``BINS``."""
    v = g.detach().float().flatten()
    v = v[torch.isfinite(v) & (v != 0)]
    _, e = torch.frexp(v)
    idx = (e.long() - EXP_MIN).clamp(0, BINS - 1)
    return torch.bincount(idx, minlength=BINS).double()
