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


def scalar_loss(tensors: Any) -> Tensor | None:
    """The loss among backward()'s arguments: a single floating-point scalar, else None."""
    if isinstance(tensors, (list, tuple)) and len(tensors) == 1:
        tensors = tensors[0]
    if isinstance(tensors, Tensor) and tensors.numel() == 1 and tensors.is_floating_point():
        return tensors.detach().reshape(())
    return None
