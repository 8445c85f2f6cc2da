"""Process-wide taps: the one place gradoc wraps a PyTorch entry point.

``torch.autograd.backward`` (which ``Tensor.backward`` calls) is wrapped while at least
one run is open, so the loss is captured with no change to the training loop. The
wrapper only hands the tensor to the open runs; it never changes what backward does.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import Tensor


class LossSink(Protocol):
    def _on_backward(self, tensors: Any) -> None: ...


_sinks: list[LossSink] = []
_original: Callable[..., Any] | None = None


def _tapped_backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
    for sink in list(_sinks):
        sink._on_backward(tensors)
    assert _original is not None
    return _original(tensors, *args, **kwargs)


def add_loss_sink(sink: LossSink) -> None:
    global _original
    if _original is None:
        _original = torch.autograd.backward
        torch.autograd.backward = functools.wraps(_original)(_tapped_backward)
    if sink not in _sinks:
        _sinks.append(sink)


def remove_loss_sink(sink: LossSink) -> None:
    global _original
    if sink in _sinks:
        _sinks.remove(sink)
    if not _sinks and _original is not None:
        torch.autograd.backward = _original
        _original = None


_CLASSIFICATION = ("NllLossBackward0", "NllLoss2DBackward0")
_BINARY = ("BinaryCrossEntropyWithLogitsBackward0", "BinaryCrossEntropyBackward0")


def loss_kind(tensors: Any) -> dict[str, Any] | None:
    """What the loss handed to backward() is, read from its autograd node (no device
    read): ``{"node": "NllLossBackward0", "classes": 65}`` for a cross-entropy over 65
    classes, whose loss at a uniform prediction (chance) is ln 65. None when the loss is
    anything else (scaled, summed with other terms, label-smoothed): no chance level."""
    if isinstance(tensors, (list, tuple)) and len(tensors) == 1:
        tensors = tensors[0]
    node = getattr(tensors, "grad_fn", None)
    if node is None:
        return None
    name = node.name()
    if name in _CLASSIFICATION:
        saved = getattr(node, "_saved_self", None)
        classes = int(saved.shape[1]) if saved is not None and saved.dim() >= 2 else None
        return {"node": name, "classes": classes}
    if name in _BINARY:
        return {"node": name, "classes": 2}
    return {"node": name}


def scalar_loss(tensors: Any) -> Tensor | None:
    """The loss among backward()'s arguments: a single floating-point scalar, else None."""
    if isinstance(tensors, (list, tuple)) and len(tensors) == 1:
        tensors = tensors[0]
    if isinstance(tensors, Tensor) and tensors.numel() == 1 and tensors.is_floating_point():
        return tensors.detach().reshape(())
    return None
