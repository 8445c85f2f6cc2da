"""The signals detectors and diagnoses share: pure functions of a run's recorded series
(trends, noise, update ratios, the program's clipping) and the module types they group by."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any, TypeVar

from .._util.text import number
from ..store import EventKind, Layer, Series
from .finding import Finding
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
    """Weight matrices and kernels with recorded gradients, input side first (computed
    once per history; the caller gets its own list)."""
    found = h.derived.get("weight_params")
    if found is None:
        found = h.derived["weight_params"] = [
            p
            for p in h.params
            if p.shape is not None
            and len(p.shape) >= 2
            and (p.type or "") not in _NOT_DEPTH
            and h.param(p.name, "grad_norm").steps
        ]
    return list(found)


def numel_of(p: Layer) -> int:
    """A parameter's element count (from its shape where the log has no count)."""
    return p.numel or math.prod(p.shape or ())


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def early_late(values: Sequence[float], least: int = 3) -> tuple[float, float]:
    """Where a loss began and where it ended: the median of its first 10% and of its last 25%
    (each at least ``least`` values; ``values`` finite and not empty)."""
    n = len(values)
    return statistics.median(values[: max(least, n // 10)]), statistics.median(
        values[-max(least, n // 4) :]
    )


IMPROVED = 0.5
"""An objective improved clearly when the median loss of its last quarter is at most this
share of the median of its first 10% of steps (it halved, or better)."""


def improved(loss: Series, since: int | None = None) -> tuple[float, float] | None:
    """Where a loss began and ended (:func:`early_late`) when it improved clearly: at least
    20 finite values, the last five finite, and the end at most :data:`IMPROVED` of the start;
    None otherwise. With ``since``, the start is the loss at that step (the first finite one
    from it): what the run did after an event there."""
    values = [v for v in loss.values if math.isfinite(v)]
    if len(values) < 20 or not all(math.isfinite(v) for v in loss.values[-5:]):
        return None
    early, late = early_late(values)
    if since is not None:
        early = next(
            (v for s, v in zip(loss.steps, loss.values) if s >= since and math.isfinite(v)),
            math.nan,
        )
    return (early, late) if 0 < late <= IMPROVED * early else None


def loss_improved(h: History, since: int | None = None) -> tuple[float, float] | None:
    """:func:`improved` of the run's loss, None where it was read on too few of the run's
    steps to say anything of it (``History.loss_covered``)."""
    return improved(h.loss, since) if h.loss_covered else None


def update_ratio(update: float, weight: float) -> float | None:
    """||update|| / ||weight|| (the weight before the update): the one definition, used by
    the detectors, the charts, the sinks and the collector. None where it means nothing: a
    zero or non-finite weight norm, a non-finite update."""
    if weight > 0 and math.isfinite(weight) and math.isfinite(update):
        return update / weight
    return None


def update_ratio_series(update: Series, weight: Series) -> Series:
    """:func:`update_ratio` at the sampled steps after step 0 (a zero-initialised tensor's
    first update is all of its norm)."""
    weights = dict(zip(weight.steps, weight.values))
    points = [
        (s, r)
        for s, u in zip(update.steps, update.values)
        if s > 0 and s in weights and (r := update_ratio(u, weights[s])) is not None
    ]
    return Series([s for s, _ in points], [r for _, r in points])


def update_ratios(h: History) -> dict[str, Series]:
    """Per weight matrix, its :func:`update_ratio_series` (computed once per history; the
    caller gets its own dict)."""
    found = h.derived.get("update_ratios")
    if found is None:
        found = h.derived["update_ratios"] = {}
        for p in weight_params(h):
            ratios = update_ratio_series(
                h.param(p.name, "update_norm"), h.param(p.name, "weight_norm")
            )
            if ratios.steps:
                found[p.name] = ratios
    return dict(found)


Sample = TypeVar("Sample", bound=tuple[Any, ...])


def second_half(h: History, samples: Sequence[Sample], least: int) -> list[Sample] | None:
    """The ``samples`` (each ``(step, ...)``, in step order) over the run's second half, or
    its last ``least`` where a sparse cadence left fewer there; None with fewer than
    ``least`` in all. What a setting does to a trained run is read there, past the start."""
    half = (h.loss.steps[-1] if h.loss.steps else 0) / 2
    late = [x for x in samples if x[0] >= half]
    late = late if len(late) >= least else list(samples[-least:])
    return late if len(late) >= least else None


def clip_factors(
    measured: Series, threshold: Series, finite: bool = False
) -> list[tuple[float, float]]:
    """Per step the program clipped, (its threshold, the factor its clip scaled the
    gradients by): 1 where the measured norm was within the threshold, else threshold /
    norm (0 for a non-finite norm, which clipping turns into NaN: it bit). ``finite``: only
    the steps whose norm was finite, where how often a clip bit says how large the gradients
    ran (after a NaN every step "bites", a clip at inf too)."""
    limits = dict(zip(threshold.steps, threshold.values))
    return [
        (t, 1.0 if v <= t else (t / v if math.isfinite(v) else 0.0))
        for s, v in zip(measured.steps, measured.values)
        if (t := limits.get(s)) is not None and (math.isfinite(v) or not finite)
    ]


def fmt(x: float) -> str:
    """A number in a finding's text: :func:`gradoc._util.text.number`, 3 significant digits."""
    return number(x, 3)


SUMMED_VARIANCE = 0.6
"""A loss is a sum over samples when dividing it by the samples per step leaves at most
this share of the variance of its logarithm."""
SUMMED_SPREAD = 1.5
"""Samples per step must vary at least this much for a sum to show."""


def loss_trend(h: History) -> tuple[Series, bool]:
    """The loss as the trend detectors (spike, divergence, blow-up, plateau) read it, and
    whether it was divided by the step's samples.

    A loss summed over samples (an episode's per-step losses added up, as
    pytorch/examples' actor-critic does; ``reduction="sum"``) grows with the batch or the
    episode: an actor-critic whose episodes lengthen as it learns shows a loss that
    rises 10x on a healthy run. When the samples per step vary (>= ``SUMMED_SPREAD``x) and
    dividing by them explains the loss's swings (the variance of log(loss / samples) is
    at most ``SUMMED_VARIANCE`` of that of log(loss); a mean-reduced loss only gets
    noisier when divided), the loss per sample is the trend; otherwise the loss itself.
    """
    samples = dict(zip(h.samples.steps, h.samples.values))
    pairs = [
        (s, v, samples[s])
        for s, v in zip(h.loss.steps, h.loss.values)
        if math.isfinite(v) and v > 0 and samples.get(s, 0) > 0
    ]
    if len(pairs) < 20:
        return h.loss, False
    counts = [n for _, _, n in pairs]
    if max(counts) < SUMMED_SPREAD * min(counts):
        return h.loss, False
    raw = statistics.pvariance([math.log(v) for _, v, _ in pairs])
    per = statistics.pvariance([math.log(v / n) for _, v, n in pairs])
    if not per <= SUMMED_VARIANCE * raw:
        return h.loss, False
    # steps whose samples are unknown (before gradoc attached) are left out, not mixed in
    kept = [(s, v / samples[s]) for s, v in zip(h.loss.steps, h.loss.values) if samples.get(s)]
    return Series([s for s, _ in kept], [v for _, v in kept]), True


def ce_classes(h: History) -> int | None:
    """The number of classes of the run's cross-entropy loss, as recorded at its first
    backward (meta ``loss_fn``, read through a loss scaler and gradient accumulation's
    division); None for any other loss, and when the recorded loss is a cross-entropy
    divided by a constant that was not undone (``loss / 2``: no chance level of ln k)."""
    k = h.meta.loss_fn.get("classes") if h.meta.loss_fn else None
    division = h.meta.loss_division
    if division and division.get("undone") is False:
        return None
    return k if isinstance(k, int) and k >= 2 else None


SQRT_V_EPS = ("Adam", "AdamW", "NAdam", "RAdam")
"""The optimizers whose step is ``lr * m / (sqrt(v) + eps)``, ``v`` in ``exp_avg_sq``."""


def optimizer_type(h: History) -> str | None:
    """The first optimizer's class name, as recorded in ``meta['optimizers']``."""
    return h.meta.optimizer()


NOISE_WINDOW = 8
"""Steps of the recent median an excursion is measured against."""


def excursion(value: float, prev: Sequence[float], positive: bool) -> float | None:
    """How far ``value`` strays from the values before it: over their median for a
    positive series, ``1 + |value - median| / median(|prev|)`` for one with values <= 0
    (None where that scale is 0)."""
    m = statistics.median(prev)
    if positive:
        return value / m
    scale = statistics.median(abs(x) for x in prev)
    return 1 + abs(value - m) / scale if scale > 0 else None


def excursions(values: Sequence[float], quantile: float = 0.95) -> float | None:
    """How far a series strays from its own recent level on an ordinary step: the
    ``quantile`` of ``v / median(previous NOISE_WINDOW values)`` over the run (a positive
    series; None for one with values <= 0 or fewer than 20 steps). A batch-mean loss has
    ~1.3; the loss of one sample (a one-weight regression fit one point at a time) or one
    episode has 10 and more, and a 10x rise is ordinary there. A single event (a bad
    batch) does not move a 95th percentile of a run of 20 steps or more.

    A series with values <= 0 (a policy-gradient loss) is measured by its distance from
    the recent median against the recent magnitude, ``1 + |v - m| / median(|prev|)``."""
    vals = [v for v in values if math.isfinite(v)]
    if len(vals) < 20:
        return None
    positive = min(vals) > 0
    ratios = [
        r
        for i in range(NOISE_WINDOW, len(vals))
        if (r := excursion(vals[i], vals[i - NOISE_WINDOW : i], positive)) is not None
    ]
    if len(ratios) < 12:
        return None
    ratios.sort()
    return ratios[min(len(ratios) - 1, int(quantile * len(ratios)))]


OUTLIER = 7.0
"""How many times the run's ordinary excess an event's excess must be (:func:`stands_out`)."""
NEVER_NOISE = 100.0
"""An excursion this large (100x its level) stands out whatever the run's noise."""


def stands_out(ratio: float, noise: float | None) -> bool:
    """An excursion of ``ratio`` (a value over its recent level) is an event, not the
    series' noise: its excess over the level, ``ratio - 1``, is more than ``OUTLIER`` (7)
    times the excess of the run's ordinary excursion (``noise``, from :func:`excursions`;
    None: no measure, it stands out). Excess, not ratio: near a level of 1 a ratio hides
    how far the tail reaches. Calibration: the calibration split's bad batches stand 11-251x
    their run's ordinary excess (cnn_bn 2.5x against 1.13, resnet 3.6x against 1.24); the
    largest excursions of the real programs' heavy-tailed healthy losses 3.7x
    (regression_manual_sgd_healthy, 31.8 against 9.4) and 4.8x (actor_critic_cartpole_healthy,
    35 against 8.1). An excursion of ``NEVER_NOISE`` (100x) or more always stands out: a
    loss 100x above where it was is never called healthy, however noisy the run."""
    if noise is None or ratio >= NEVER_NOISE:
        return True
    return ratio - 1 > OUTLIER * max(noise - 1, 0.0)


def loss_noise(h: History) -> float | None:
    """:func:`excursions` of the loss as the detectors read it (:func:`loss_trend`),
    computed once per history."""
    if "loss_noise" not in h.derived:
        h.derived["loss_noise"] = excursions(loss_trend(h)[0].values)
    noise: float | None = h.derived["loss_noise"]
    return noise


RISE = 2.0
MIN_SHARE = 0.1
"""A loss has diverged when its level is above ``RISE`` times its best, having lost at least
``MIN_SHARE`` of the ground gained (loss_divergence's rule, and the guard's rollback)."""


def diverged(level: float, best: float, start: float, rise: float = RISE) -> bool:
    """A smoothed loss ``level`` has diverged from its ``best`` level: above ``rise`` times
    it, having lost at least ``MIN_SHARE`` of the ground gained since ``start``."""
    return best > 0 and level > rise * best and level - best >= MIN_SHARE * (start - best)


ADAM_FAMILY = ("Adam", "AdamW", "NAdam", "RAdam", "Adamax", "SparseAdam", "Lion")
"""Optimizers whose per-element step is normalised (about the learning rate in size)."""


def audited(h: History, kind: str) -> list[Finding]:
    """The padding audit's findings of ``kind`` (``padding_audit`` events, written by
    ``locate/padding.py``), each once per layer, at the first step it was seen."""
    seen: set[str | None] = set()
    found = []
    for e in h.events:
        if e.kind != EventKind.PADDING_AUDIT or e.data["finding"]["kind"] != kind:
            continue
        f = e.data["finding"]
        if f.get("layer") in seen:
            continue
        seen.add(f.get("layer"))
        found.append(
            Finding(
                kind=f["kind"],
                severity=f["severity"],
                step=e.step,
                layer=f.get("layer"),
                summary=f["summary"],
                evidence=f.get("evidence", []),
                details=f.get("details") or {},
            )
        )
    return found
