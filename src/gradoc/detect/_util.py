"""Small helpers shared by detectors (pure functions of series)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from ..store import Layer, Series
from .history import History

NORM_TYPES = (
    "LayerNorm",
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "GroupNorm",
    "RMSNorm",
    "InstanceNorm1d",
    "InstanceNorm2d",
    "InstanceNorm3d",
)
# Parameters whose gradient scale says something about depth: weight matrices and
# convolution kernels, not biases, norm scales or embedding tables (sparse gradients).
_NOT_DEPTH = ("Embedding", "EmbeddingBag", *NORM_TYPES)


def finite(s: Series) -> tuple[list[int], list[float]]:
    pairs = [(st, v) for st, v in zip(s.steps, s.values) if math.isfinite(v)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def weight_params(h: History) -> list[Layer]:
    """Weight matrices and kernels with recorded gradients, input side first."""
    return [
        p
        for p in h.params
        if p.shape is not None
        and len(p.shape) >= 2
        and (p.type or "") not in _NOT_DEPTH
        and h.param(p.name, "grad_norm").steps
    ]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def update_ratios(h: History) -> dict[str, Series]:
    """Per weight matrix, ||update|| / ||weight|| at the sampled steps after step 0.

    Step 0 is left out: a zero-initialised tensor's first update is all of its norm.
    """
    out: dict[str, Series] = {}
    for p in weight_params(h):
        upd, w = h.param(p.name, "update_norm"), h.param(p.name, "weight_norm")
        weights = dict(zip(w.steps, w.values))
        steps, ratios = [], []
        for s, u in zip(upd.steps, upd.values):
            wv = weights.get(s)
            if s > 0 and wv and math.isfinite(u) and math.isfinite(wv) and wv > 0:
                steps.append(s)
                ratios.append(u / wv)
        if steps:
            out[p.name] = Series(steps, ratios)
    return out


def fmt(x: float) -> str:
    return f"{x:.3g}" if math.isfinite(x) else repr(x).lower()
