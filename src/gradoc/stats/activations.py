"""Statistics of one module output, and how to combine several calls of the same module.

A module output ``x`` is summarised on its own device as one small vector::

    [mean, M2, zeros, nonfinite, saturated]

(``M2`` is the sum of squared deviations from the mean, so calls combine exactly with
Chan's parallel formula) plus, where the output has a unit dimension, the count of
positions at which each unit is *active* (output > 0). For ReLU-family outputs a unit
that is never active is dead; one that is active rarely is merely sparse.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn as nn
from torch import Tensor

SaturationRule = Callable[[Tensor], Tensor]

# Saturated = the unit's local derivative is below 1% of its peak, so almost no gradient
# flows through it. For sigmoid, y(1-y) < 0.01 * 0.25 (|pre-activation| > 5.99); for tanh,
# 1 - y^2 < 0.01 (|pre-activation| > 2.99); for softsign, (1-|y|)^2 < 0.01 (|y| > 0.9);
# piecewise-linear families are saturated exactly at their bounds (derivative 0).
_SATURATION: list[tuple[type[nn.Module], Callable[[Any], SaturationRule]]] = [
    (nn.Sigmoid, lambda m: lambda y: y * (1 - y) < 0.0025),
    (nn.Tanh, lambda m: lambda y: 1 - y * y < 0.01),
    (nn.Softsign, lambda m: lambda y: y.abs() > 0.9),
    (nn.Hardtanh, lambda m: _at_bounds(float(m.min_val), float(m.max_val))),  # and ReLU6
    (nn.Hardsigmoid, lambda m: _at_bounds(0.0, 1.0)),
]


def _at_bounds(lo: float, hi: float) -> SaturationRule:
    return lambda y: (y <= lo) | (y >= hi)


# Modules whose 3-D outputs are (batch, channels, length) rather than (batch, time, features).
_CHANNELS_FIRST = (
    nn.modules.conv._ConvNd,
    nn.modules.batchnorm._BatchNorm,
    nn.modules.instancenorm._InstanceNorm,
    nn.GroupNorm,
    nn.modules.pooling._MaxPoolNd,
    nn.modules.pooling._AvgPoolNd,
    nn.modules.pooling._AdaptiveAvgPoolNd,
    nn.modules.pooling._AdaptiveMaxPoolNd,
)

MAX_UNITS = 16384
"""Outputs with more units than this (e.g. a vocabulary-sized head) keep no per-unit counts."""


def saturation_rule(module: nn.Module) -> SaturationRule | None:
    """The saturation predicate for a sigmoid/tanh-family module, else ``None``."""
    for cls, make in _SATURATION:
        if isinstance(module, cls):
            return make(module)
    return None


def unit_dim(module: nn.Module, x: Tensor) -> int | None:
    """Which dimension of an output holds the units (features or channels).

    Channels (dim 1) for 4-D and 5-D outputs and for 3-D outputs of convolution, pooling
    and normalisation layers; the last dimension otherwise (``(batch, features)`` and
    ``(batch, time, features)``). ``None`` when there is no batch dimension or too many units.
    """
    if x.dim() < 2:
        return None
    dim = 1 if x.dim() >= 4 or (x.dim() == 3 and isinstance(module, _CHANNELS_FIRST)) else -1
    return dim if x.shape[dim] <= MAX_UNITS else None


def activation_stats(
    x: Tensor,
    saturation: SaturationRule | None = None,
    units: int | None = None,
    scratch: Tensor | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Summarise one output tensor: the 5-vector above and the per-unit active counts.

    The element count is ``x.numel()``, known on the host, so it is not part of the vector.
    ``scratch``, a flat buffer of x's dtype and device with at least ``x.numel()``
    elements, is used for the one temporary instead of a fresh allocation.

    >>> v, act = activation_stats(torch.tensor([[0.0, 2.0], [0.0, 2.0]]), units=-1)
    >>> v.tolist(), act.tolist()  # mean, M2, zeros, non-finite, saturated (n/a); per unit
    ([1.0, 4.0, 2.0, 0.0, nan], [0.0, 2.0])
    """
    # NOTE: built from plain sums and count_nonzero: on CPU, var_mean and reductions of
    # boolean masks are 5-20x slower than these (measured on a 16x64x256 output).
    x = x.detach()
    if x.dtype not in (torch.float32, torch.float64):
        x = x.float()  # half types: accumulate in float32; integers: count as numbers
    dtype = torch.float32 if x.device.type == "mps" else torch.float64
    n = x.numel()
    total = x.sum()
    mean = total / n
    buf = x.new_empty(x.shape) if scratch is None else scratch[:n].view(x.shape)
    torch.sub(x, mean, out=buf)
    m2 = torch.linalg.vector_norm(buf) ** 2  # two-pass: exact where E[x^2]-E[x]^2 is not
    # x * 0 is 0 where x is finite, NaN elsewhere (into the scratch buffer: no allocation)
    nonfinite = torch.count_nonzero(torch.mul(x, 0, out=buf))
    parts = [
        mean.to(dtype),  # NOTE: the stack promotes the rest to it: no cast per part
        m2,
        n - torch.count_nonzero(x),
        nonfinite,
        saturation(x).sum() if saturation is not None else x.new_full((), math.nan),
    ]
    active = None
    if units is not None:
        dims = [d for d in range(x.dim()) if d != units % x.dim()]
        # count of outputs > 0 per unit, reusing the scratch buffer for relu(x) -> {0, 1}
        active = torch.clamp(x, min=0, out=buf).sign_().sum(dim=dims).to(dtype)
    return torch.stack(parts).to(dtype), active


def activation_stats_rows(
    m: Tensor, saturation: SaturationRule | None = None, units: int | None = None
) -> tuple[Tensor, Tensor | None]:
    """:func:`activation_stats` of ``k`` outputs of one shape at once: ``m`` holds them
    stacked along a new first dimension (``units`` is the dimension of one output). The
    ``(k, 5)`` vectors and the ``(k, units)`` active counts, each row that output's.

    NOTE: a wide model's small outputs are summarised this way (~15 ops a shape instead of
    ~18 a module); the values are the per-output ones, summed in another order.

    >>> v, act = activation_stats_rows(torch.tensor([[[0.0, 2.0]], [[1.0, 1.0]]]), units=-1)
    >>> v.tolist(), act.tolist()
    ([[1.0, 2.0, 1.0, 0.0, nan], [1.0, 0.0, 0.0, 0.0, nan]], [[0.0, 1.0], [1.0, 1.0]])
    """
    x = m.detach()
    if x.dtype not in (torch.float32, torch.float64):
        x = x.float()
    dtype = torch.float32 if x.device.type == "mps" else torch.float64
    k = x.shape[0]
    flat = x.reshape(k, -1)
    n = flat.shape[1]
    mean = flat.sum(dim=1) / n
    dev = flat - mean[:, None]
    m2 = torch.linalg.vecdot(dev, dev, dim=1)  # two-pass, as for one output
    parts = [
        mean.to(dtype),
        m2,
        n - torch.count_nonzero(flat, dim=1),
        torch.count_nonzero(torch.mul(flat, 0, out=dev), dim=1),  # NaN where not finite
        saturation(flat).sum(dim=1) if saturation is not None else flat.new_full((k,), math.nan),
    ]
    active = None
    if units is not None:
        unit = units % (x.dim() - 1) + 1  # the units' dimension in the stack
        dims = [d for d in range(1, x.dim()) if d != unit]  # an output with units has 2+
        active = torch.clamp(x, min=0).sign_().sum(dim=dims).to(dtype)
    return torch.stack(parts, dim=1).to(dtype), active


@dataclass(slots=True)
class ActivationStats:
    """One module's output statistics for one step (all calls combined)."""

    numel: int
    mean: float
    std: float
    zero_frac: float
    sat_frac: float | None
    nonfinite: int
    positions: int
    """How many positions each unit was observed at (numel / units)."""
    unit_active: np.ndarray[Any, Any] | None
    """Per unit, the fraction of positions at which it was active (output > 0)."""


def combine(
    calls: Sequence[tuple[int, Sequence[float]]],
    actives: Sequence[Sequence[float] | np.ndarray[Any, Any] | None],
) -> ActivationStats:
    """Merge the per-call ``(numel, vector)`` summaries of one module (Chan's parallel
    variance); ``actives``: each call's per-unit active counts (arrays or lists). A module
    called once has nothing to merge (the common one; the writer thread runs this for every
    module of a sampled step, holding the GIL against training)."""
    if len(calls) == 1:
        return _one(*calls[0], actives[0])
    n = mean = m2 = zeros = nonfinite = 0.0
    sat: float | None = 0.0
    for nb, v in calls:
        mb, m2b, zb, fb, sb = v
        delta = mb - mean
        tot = n + nb
        mean = mean + delta * nb / tot if tot else 0.0
        m2 = m2 + m2b + delta * delta * n * nb / tot if tot else 0.0
        n, zeros, nonfinite = tot, zeros + zb, nonfinite + fb
        sat = None if sat is None or math.isnan(sb) else sat + sb
    units: np.ndarray[Any, Any] | None = None
    positions = 0
    widths = {len(a) for a in actives if a is not None}
    if actives and all(a is not None for a in actives) and len(widths) == 1 and 0 not in widths:
        (width,) = widths
        positions = int(n // width)
        # NOTE: one array operation over every unit (a wide layer has thousands, and this
        # runs on the writer thread, holding the GIL against training): no Python per unit
        sums = np.asarray(actives, dtype=np.float64).sum(axis=0)
        units = sums / positions if positions else np.zeros(width)
    return ActivationStats(
        numel=int(n),
        mean=mean,
        std=math.sqrt(m2 / n) if n and m2 >= 0 else (math.nan if math.isnan(m2) else 0.0),
        zero_frac=zeros / n if n else 0.0,
        sat_frac=(sat / n if n else 0.0) if sat is not None else None,
        nonfinite=int(nonfinite),
        positions=positions,
        unit_active=units,
    )


def _one(
    n: int, v: Sequence[float], active: Sequence[float] | np.ndarray[Any, Any] | None
) -> ActivationStats:
    """:func:`combine` of one call: its own statistics, normalised."""
    mean, m2, zeros, nonfinite, sat = v
    width = len(active) if active is not None else 0
    positions = int(n // width) if width else 0
    units = None
    if active is not None and width:
        units = np.asarray(active, dtype=np.float64) / positions if positions else np.zeros(width)
    return ActivationStats(
        numel=int(n),
        mean=mean if n else 0.0,
        std=math.sqrt(m2 / n) if n and m2 >= 0 else (math.nan if math.isnan(m2) else 0.0),
        zero_frac=zeros / n if n else 0.0,
        sat_frac=None if math.isnan(sat) else (sat / n if n else 0.0),
        nonfinite=int(nonfinite),
        positions=positions,
        unit_active=units,
    )
