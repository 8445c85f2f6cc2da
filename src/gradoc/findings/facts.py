"""Facts about a run that hypotheses and ruled-out diagnoses cite, computed once, and the
expectations they are weighed against: what this optimizer's steps look like on a healthy
run, and how noisy this run's loss is on its own."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ..detect.history import History
from ..detect.signals import (
    ADAM_FAMILY,
    NORM_TYPES,
    clip_factors,
    finite,
    loss_noise,
    optimizer_type,
    update_ratios,
    weight_params,
)

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
    """99th percentile of the finite global gradient norms before the first problem; None
    with fewer than :data:`SCALE_STEPS` of them (the p99 of three steps is their largest,
    and a run that blows up from its third step has no healthy scale to clip at)."""
    grad_median: float | None
    max_update_ratio: float | None
    """Largest update/weight ratio of a weight matrix before the first problem."""
    median_update_ratio: float | None
    first_update_ratio: float | None = None
    """Largest update/weight ratio of a weight matrix at its first recorded update (the
    learning rate acting on the initial weights)."""
    zero_weights: list[str] | None = None
    """Weight matrices whose norm was exactly 0 at their first record: every unit computes
    the same thing and receives the same gradient (no symmetry to break)."""
    early_peak_loss: float | None = None
    """The highest finite loss of the first 20% of the run, when it is >= 2x the first."""
    clip: tuple[float, int, int] | None = None
    """The program's own gradient clipping: (its threshold, steps it bit on, steps it ran)."""
    optimizer: str | None = None
    """The first optimizer's class name (``meta['optimizers']``)."""
    outputs_seen: bool = True
    """The modules' outputs were watched (not inside a ``torch.compile``'d model, where no
    per-module hook runs): only then does "no dead or saturated layer" mean none was."""
    weight_decay: tuple[float, float] | None = None
    """The first optimizer's weight decay, where it is above 0: (its setting, the share of
    each weight it takes away per step: ``lr * wd``, over ``1 - momentum`` for SGD with
    momentum, whose velocity accumulates the decay term)."""
    weight_shrink: float | None = None
    """The median over weight matrices of their last sampled norm over their first: below 1
    the weights shrank over the run."""
    loss_noise: float | None = None
    """The run's own noise: the 95th percentile of the loss's excursions over its recent
    median (:func:`gradoc.detect.signals.excursions`); 1.3 for a batch-mean loss, 10 and
    more for a loss of one sample or one episode."""
    weight_gains: list[float] | None = None
    """The backward gain of each Linear/Conv weight matrix at its first record, input side
    first: ``||W|| / sqrt(W.shape[1])``, the factor by which a gradient's RMS is scaled
    passing back through it (a zero-mean random W; strides ignored, so an upper bound)."""

    @property
    def adam(self) -> bool:
        """Adam and its kin: each element's step is about the learning rate."""
        return self.optimizer in ADAM_FAMILY

    @property
    def large_ratio(self) -> float:
        """The update/weight ratio above which one step is large for this optimizer. SGD's
        step is lr x gradient, ~1e-3 of the weights on a healthy run: 1e-2 is large. Adam's
        moves every element by about the learning rate whatever the gradient, and more so
        on its first steps (no second moment yet): lr 3e-3 on a layer of weight RMS 0.1 is
        0.03 on a healthy run, so 0.1 is large (the real programs' healthy Adam runs:
        0.007-0.08)."""
        return 0.1 if self.adam else 1e-2

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


SCALE_STEPS = 20
"""Finite gradient norms before the first problem needed for their p99 to be a scale."""


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
        grad_p99=_quantile(early, 0.99) if len(early) >= SCALE_STEPS else None,
        grad_median=statistics.median(early) if early else None,
        max_update_ratio=max(ratios) if ratios else None,
        median_update_ratio=statistics.median(ratios) if ratios else None,
        first_update_ratio=_first_update_ratio(h),
        zero_weights=[
            p.name
            for p in weight_params(h)
            if (w := h.param(p.name, "weight_norm")).values and w.values[0] == 0.0
        ],
        early_peak_loss=_early_peak(h),
        weight_gains=_weight_gains(h),
        clip=_clip(h),
        optimizer=optimizer_type(h),
        loss_noise=loss_noise(h),
        weight_decay=weight_decay_of(h),
        outputs_seen=bool(h.act_stats) and not h.meta.compiled,
        weight_shrink=_weight_shrink(h),
    )


def weight_decay_of(h: History) -> tuple[float, float] | None:
    """The first optimizer's weight decay, where it is above 0: its setting, and the share of
    every weight it takes a step (``Facts.weight_decay``)."""
    opts = h.meta.optimizers or []
    first = opts[0] if opts else {}
    wd, lr = first.get("weight_decay"), first.get("lr")
    if not isinstance(wd, (int, float)) or not isinstance(lr, (int, float)) or wd <= 0:
        return None
    momentum = first.get("momentum") if first.get("type") == "SGD" else None
    keep = 1.0 - momentum if isinstance(momentum, (int, float)) and 0 <= momentum < 1 else 1.0
    return float(wd), lr * wd / keep


def _weight_shrink(h: History) -> float | None:
    ratios = [
        w.values[-1] / w.values[0]
        for p in weight_params(h)
        if len((w := h.param(p.name, "weight_norm")).values) >= 2
        and w.values[0] > 0
        and math.isfinite(w.values[-1])
    ]
    return statistics.median(ratios) if ratios else None


def _clip(h: History) -> tuple[float, int, int] | None:
    factors = clip_factors(h.clip_norm, h.clip_max, finite=True)
    if not factors:
        return None
    return factors[0][0], sum(1 for _, f in factors if f < 1.0), len(factors)


GAIN_TYPES = ("Linear", "Conv1d", "Conv2d", "Conv3d")
"""The layers a gradient passes back through as ``W^T`` (embeddings and recurrent cells
have other gains)."""


def _weight_gains(h: History) -> list[float]:
    gains = []
    for p in weight_params(h):
        w = h.param(p.name, "weight_norm")
        if p.type in GAIN_TYPES and p.shape and w.values and math.isfinite(w.values[0]):
            gains.append(w.values[0] / math.sqrt(p.shape[1]))
    return gains


def _early_peak(h: History) -> float | None:
    values = [v for v in h.loss.values[: max(5, len(h.loss.values) // 5)] if math.isfinite(v)]
    if len(values) < 2 or values[0] <= 0:
        return None
    peak = max(values)
    return peak if peak >= 2 * values[0] else None


def _first_update_ratio(h: History) -> float | None:
    found = []
    for p in weight_params(h):
        upd, w = h.param(p.name, "update_norm"), h.param(p.name, "weight_norm")
        if upd.steps and w.steps and upd.steps[0] == w.steps[0]:
            u, wv = upd.values[0], w.values[0]
            if math.isfinite(u) and math.isfinite(wv) and wv > 0:
                found.append(u / wv)
    return max(found) if found else None


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
