"""Sequence lengths of the batches: where they come from, and batches of unusual lengths.

Per forward of the watched model the per-sample lengths are taken from (in this order) a
padding-mask keyword argument (``attention_mask``: 1 = real; ``*key_padding_mask``,
``padding_mask``, ``pad_mask``, ``mask``: True = pad), a 1-D integer argument whose name
contains ``len`` (``lengths``, ``seq_len``), or, for 2-D integer token ids (the first
positional input, or ``input_ids=``), the ids that are not the model's padding id (its
embedding's ``padding_idx``: the source then says no mask was given), else their padded
length. Their min, max and sum travel with the step's statistics.

``length_anomaly``: after ``WARMUP`` (20) batches, a batch whose shortest sequence is
shorter than any seen before and either at most half the previous shortest or at most 2
tokens (length 1 and 2 are where length-dependent code divides by zero), or whose longest
is at least twice the longest seen.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn
from torch import Tensor

from ..._util import objects
from ..._util.json_types import JsonObject
from ..._util.objects import WeakIdMap
from ..._util.state import RngState
from ..._util.tree import arguments
from ...locate.padding import mask_pads
from ...store import EventKind
from ..probe import Probe

if TYPE_CHECKING:
    from ..step import Packet

WARMUP = 20


BATCH_KWARGS = ("input_ids", "inputs_embeds", "src", "x", "tokens", "idx")
"""Keyword arguments that hold the batch when a model is called without positional ones
(``model(input_ids=..., attention_mask=..., labels=...)``: Hugging Face)."""


def batch_of(args: Any, kwargs: dict[str, Any]) -> tuple[str | None, Tensor | None]:
    """The batch a model was called with: its first positional argument (key None), else
    the first of ``BATCH_KWARGS`` given (its key)."""
    if args:
        first = args[0]
        return None, first if isinstance(first, Tensor) else None
    for key in BATCH_KWARGS:
        value = kwargs.get(key)
        if isinstance(value, Tensor) and value.dim() >= 2:
            return key, value
    return None, None


_pad_ids: WeakIdMap[nn.Module, int | None] = WeakIdMap()


def pad_id(root: nn.Module) -> int | None:
    """The ``padding_idx`` of the model's first Embedding that has one, else the pad token
    its Hugging Face config names (``config.pad_token_id``); looked up once."""
    if root not in _pad_ids:
        config_pad = objects.attribute(objects.attribute(root, "config"), "pad_token_id")
        _pad_ids[root] = next(
            (
                e.padding_idx
                for e in objects.modules(root)
                if isinstance(e, nn.Embedding) and e.padding_idx is not None
            ),
            config_pad if isinstance(config_pad, int) else None,
        )
    return _pad_ids[root]


def batch_lengths(
    root: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Tensor | None, str | None, int | None, bool]:
    """(per-sample lengths on the device, where they came from, padded length, whether
    the pads were found with no mask argument); for token
    ids without a mask the lengths are the ids that are not the model's padding id (its
    embedding's ``padding_idx``), else the padded length, known on the host (None)."""
    found = mask_pads(kwargs)
    if found is not None:
        pads, key = found
        return (~pads).sum(1), key, pads.shape[1], False
    _, first = batch_of(args, kwargs)
    padded = first.shape[1] if isinstance(first, Tensor) and first.dim() >= 2 else None
    # a call with one argument (the batch) has no lengths argument: no binding (~7 us)
    named = arguments(root, args, kwargs) if len(args) + len(kwargs) > 1 else {}
    for name, v in named.items():
        if (
            "len" in name.lower()
            and isinstance(v, Tensor)
            and v.dim() == 1
            and not v.dtype.is_floating_point
        ):
            return v, name, padded, False
    if isinstance(first, Tensor) and first.dim() == 2 and not first.dtype.is_floating_point:
        pad = pad_id(root)
        if pad is not None:  # pads the model knows, and no mask said where they are
            return (first != pad).sum(1), f"padding_idx {pad}, no mask", first.shape[1], True
        return None, "shape", first.shape[1], False
    return None, None, None, False


@dataclass(slots=True)
class LengthMonitor:
    batches: int = 0
    low: int | None = None
    high: int | None = None
    source: str | None = None
    unmasked: bool = False
    """The pads were found by the model's ``padding_idx``: no mask argument said where."""
    total: float = 0.0
    samples: int = 0
    padded_total: float = 0.0
    histogram: dict[int, int] = field(default_factory=dict)
    """Batches by the log2 bucket of their shortest sequence."""
    mask_param: str | None = None
    """The padding-mask argument the model's forward takes and was not given pads for."""
    pad_id: int | None = None
    """The model's pad token (its embedding's ``padding_idx``, or its config's), if it has one."""
    labels_scored: float = 0.0
    """Positions the ``labels=`` of the first ``LABEL_CHECKS`` batches score (not -100)..."""
    labels_on_pads: float = 0.0
    """... and of those, the padded ones."""

    def observe(
        self, step: int, lo: int, hi: int, total: float, n: int, padded: int | None
    ) -> JsonObject | None:
        """Account for one batch; an anomaly's description, if this batch is one."""
        anomaly = None
        if self.batches >= WARMUP and self.low is not None and self.high is not None:
            if lo < self.low and (lo <= self.low / 2 or lo <= 2):
                anomaly = {
                    "what": "short",
                    "min": lo,
                    "previous_min": self.low,
                    "message": f"batch of step {step}: shortest sequence {lo} "
                    f"(before: >= {self.low})",
                }
            elif hi >= 2 * self.high:
                anomaly = {
                    "what": "long",
                    "max": hi,
                    "previous_max": self.high,
                    "message": f"batch of step {step}: longest sequence {hi} "
                    f"(before: <= {self.high})",
                }
        if anomaly is not None:
            anomaly["source"] = self.source
        self.batches += 1
        self.low = lo if self.low is None else min(self.low, lo)
        self.high = hi if self.high is None else max(self.high, hi)
        self.total += total
        self.samples += n
        if padded:
            self.padded_total += padded * n
        bucket = max(0, int(lo).bit_length() - 1)
        self.histogram[bucket] = self.histogram.get(bucket, 0) + 1
        return anomaly

    def summary(self) -> JsonObject:
        mean = self.total / self.samples if self.samples else None
        return {
            "source": self.source,
            "unmasked": self.unmasked,
            "batches": self.batches,
            "min": self.low,
            "max": self.high,
            "mean": mean,
            "padding_ratio": 1 - self.total / self.padded_total if self.padded_total else None,
            "mask_param": self.mask_param,
            "pad_id": self.pad_id,
            "labels_scored": self.labels_scored,
            "labels_on_pads": self.labels_on_pads,
            "min_length_log2_histogram": {str(2**k): c for k, c in sorted(self.histogram.items())},
        }


def stats(lengths: Tensor) -> Tensor:
    """min, max, sum of a lengths tensor, as one float64 vector (for a transfer's host read)."""
    v = lengths.detach()
    return torch.stack([v.min(), v.max(), v.sum()]).double()


Batch = tuple[Tensor | None, int, int | None]
"""A batch's lengths: (per sample, on the device, or None when the width says them),
samples, padded width."""


class Lengths(Probe):
    """The steps' batch lengths, read with their statistics, and the ``length_anomaly``
    events of a :class:`LengthMonitor`."""

    def __init__(self, event: Callable[..., None]) -> None:
        self.event = event
        self.monitor = LengthMonitor()
        self._batch: Batch | None = None
        self._waiting: list[tuple[int, Batch]] = []
        self._labels: list[Tensor] = []
        """(scored positions that are pads, scored positions) of the batches checked, on the
        device until the next transfer reads them."""
        self._label_checks = 0

    def on_forward(
        self, root: nn.Module, args: Any, kwargs: Any, output: Any, rng: RngState
    ) -> None:
        lengths, source, padded, unmasked = batch_lengths(root, args, kwargs)
        if self.monitor.source is None and source is not None:
            self.monitor.source, self.monitor.unmasked = source, unmasked
            self.monitor.mask_param = mask_param(root) if unmasked else None
            self.monitor.pad_id = pad_id(root)
        _, batch = batch_of(args, kwargs)
        if self._label_checks < LABEL_CHECKS and isinstance(kwargs.get("labels"), Tensor):
            self._label_checks += 1
            scored = labels_on_pads(root, batch, kwargs)
            if scored is not None:
                self._labels.append(scored)
        if lengths is not None:
            self._batch = (lengths, lengths.numel(), padded)
        elif padded is not None and batch is not None:  # every sample as wide as the batch
            self._batch = (None, batch.shape[0], padded)

    def take(self, step: int) -> None:
        """The step's statistics point: its batch waits for the next transfer."""
        batch, self._batch = self._batch, None
        if batch is not None:
            self._waiting.append((step, batch))

    def pack(self, pack: Packet) -> None:
        """Add the waiting batches' min, max and sum to a transfer's packet (one part); the
        monitor hears of them, in order, when it is read."""
        if self._labels:
            labels, self._labels = torch.stack(self._labels), []
            at_labels = pack.add(labels.flatten())
            pack.on_read(lambda host: self._count_labels(host[at_labels].tolist()))
        waiting, self._waiting = self._waiting, []
        if not waiting:
            return
        measured = [b[0] for _, b in waiting if b[0] is not None]
        at = pack.add(torch.stack([stats(v) for v in measured])) if measured else None
        pack.on_read(lambda host: self._observe(waiting, host, at))

    def _observe(self, waiting: list[tuple[int, Batch]], host: Tensor, at: slice | None) -> None:
        """Feed the batches' lengths to the monitor: min, max, sum from the host read, or,
        for token ids without a mask, the batch's width (known on the host)."""
        read = host[at].tolist() if at is not None else []
        k = 0
        for step, (lengths, n, padded) in waiting:
            if lengths is not None:
                lo, hi, total = int(read[k]), int(read[k + 1]), read[k + 2]
                k += 3
            elif padded is not None:
                lo, hi, total = padded, padded, float(n * padded)
            else:
                continue
            anomaly = self.monitor.observe(step, lo, hi, total, n, padded)
            if anomaly is not None:
                message = anomaly.pop("message")
                self.event(EventKind.LENGTH_ANOMALY, message, step=step, **anomaly)

    def _count_labels(self, read: list[float]) -> None:
        self.monitor.labels_on_pads += sum(read[0::2])
        self.monitor.labels_scored += sum(read[1::2])

    def close(self, step: int) -> JsonObject:
        return {"lengths": self.monitor.summary()} if self.monitor.batches else {}


LABEL_CHECKS = 3
"""Batches whose ``labels=`` are checked against their pads (the first ones: a collator
treats every batch alike)."""

IGNORE_INDEX = -100
"""The label a loss skips (PyTorch's and Hugging Face's default ``ignore_index``)."""

MASK_PARAMS = ("attention_mask", "src_key_padding_mask", "key_padding_mask", "padding_mask")
"""Forward arguments that tell a model where the pads are."""


def mask_param(root: nn.Module) -> str | None:
    """The padding-mask argument ``root``'s forward accepts (Hugging Face models take
    ``attention_mask``), if any."""
    try:
        params = inspect.signature(root.forward).parameters
    except (TypeError, ValueError):
        return None
    return next((name for name in MASK_PARAMS if name in params), None)


def labels_on_pads(root: nn.Module, ids: Tensor | None, kwargs: dict[str, Any]) -> Tensor | None:
    """(positions ``labels`` scores that are pads, positions it scores), on the device, for a
    Hugging Face style call ``model(input_ids, attention_mask=..., labels=...)``: pads from
    the mask, else from the model's pad id; None when neither says where they are."""
    labels = kwargs["labels"]
    found = mask_pads(kwargs)
    if found is not None:
        pads = found[0]
    else:
        pad = pad_id(root)
        if pad is None or ids is None or ids.dtype.is_floating_point:
            return None
        pads = ids == pad
    if pads.shape != labels.shape:
        return None
    scored = labels != IGNORE_INDEX
    return torch.stack([(scored & pads.to(scored.device)).sum(), scored.sum()]).double()
