"""Facts about a run that hypotheses and ruled-out diagnoses cite, computed once."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ..detect._util import NORM_TYPES, finite, update_ratios, weight_params
from ..detect.history import History

RECURRENT = ("RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell")
NORMS = NORM_TYPES
SATURATING = ("Sigmoid", "Tanh", "Softsign", "Hardtanh", "Hardsigmoid")
RELU_LIKE = ("ReLU", "ReLU6", "LeakyReLU", "GELU", "SiLU", "ELU", "Mish")


@dataclass(slots=True)
class Facts:
    steps: int
    lr: float | None
    depth: int
    """Weight matrices with gradients (a proxy for depth)."""
    module_types: set[str]
    grad_p99: float | None
    """99th percentile of the finite global gradient norms before the first problem."""
    grad_median: float | None
    max_update_ratio: float | None
    """Largest update/weight ratio of a weight matrix before the first problem."""
    median_update_ratio: float | None

    @property
    def recurrent(self) -> bool:
        return bool(self.module_types & set(RECURRENT))

    @property
    def normalised(self) -> bool:
        return bool(self.module_types & set(NORMS))

    @property
    def saturating(self) -> list[str]:
        return sorted(self.module_types & set(SATURATING))

    @property
    def relu_like(self) -> list[str]:
        return sorted(self.module_types & set(RELU_LIKE))


def gather(h: History, before: int | None) -> Facts:
    """Facts from the steps before ``before`` (the first problem), or the whole run."""
    limit = before if before is not None else math.inf
    early = [v for s, v in zip(*finite(h.grad_norm)) if s < limit]
    ratios = [
        r
        for series in update_ratios(h).values()
        for s, r in zip(series.steps, series.values)
        if s < limit
    ]
    return Facts(
        steps=h.num_steps,
        lr=h.lr.values[-1] if h.lr.values else None,
        depth=len(weight_params(h)),
        module_types={m.type for m in h.modules if m.type},
        grad_p99=_quantile(early, 0.99),
        grad_median=statistics.median(early) if early else None,
        max_update_ratio=max(ratios) if ratios else None,
        median_update_ratio=statistics.median(ratios) if ratios else None,
    )


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
