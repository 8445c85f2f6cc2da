"""Process-wide taps: the one place gradoc wraps PyTorch entry points.

While at least one run is open, ``torch.autograd.backward`` (which ``Tensor.backward``
calls) and ``torch.autograd.grad`` are wrapped, so the loss is captured with no change to
the training loop, and a program that trains without ``torch.optim`` has its steps
counted at them; ``torch.optim.Optimizer.__init__`` is wrapped to know whether any
optimizer exists. The wrappers only hand the tensors to the open runs; they never change
what PyTorch does or returns, and compose with wrappers of the same functions installed
by others (see ``_patch``): this is the only wrapper of them in gradoc.
"""

from __future__ import annotations

import contextlib
import os
import sys
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import torch
from torch import Tensor
from torch.optim import Optimizer

from .._patch import Patch


class LossSink(Protocol):
    def on_backward(self, tensors: Any, inputs: Any = None, direct: bool = True) -> None: ...

    def after_backward(self, tensors: Any, inputs: Any, grads: Any, direct: bool) -> None: ...


_sinks: list[LossSink] = []
_optimizers: weakref.WeakSet[Optimizer] = weakref.WeakSet()


_TORCH = os.path.dirname(torch.__file__) + os.sep
_TENSOR = os.path.join(_TORCH, "_tensor.py")
_GRADOC = os.path.dirname(os.path.dirname(__file__)) + os.sep
_DEMO = os.path.join(_GRADOC, "demo") + os.sep


def _direct(depth: int = 2) -> bool:
    """Called by the program itself (``loss.backward()``, ``torch.autograd.grad(...)``),
    not by PyTorch (a reentrant checkpoint's backward, ``autograd.functional.jacobian``)
    nor inside a backward already running: only a direct call is a training step."""
    if torch._C._current_autograd_node() is not None:
        return False
    caller = sys._getframe(depth).f_code.co_filename
    if caller.startswith(_GRADOC) and not caller.startswith(_DEMO):
        return False  # gradoc's own replays
    return caller == _TENSOR or not caller.startswith(_TORCH)


_loss_scale: list[Callable[[Tensor], Tensor]] = []
"""``gradoc amp-compare``'s simulated fp16 loss scaling (see :func:`scaling_losses`)."""


def _around(
    tensors: Any,
    inputs: Any,
    direct: bool,
    call: Callable[[Any], Any],
    *,
    scaled: bool,
    gives: bool,
) -> Any:
    """One tapped call, ``call(tensors)``: the sinks hear of it before and after.
    ``scaled``: amp-compare's loss scaling applies (no gradients given); ``gives``: the
    result is the gradients (``autograd.grad``), which the sinks are handed."""
    for sink in list(_sinks):
        sink.on_backward(tensors, inputs, direct)
    if _loss_scale and scaled and scalar_loss(tensors) is not None:
        tensors = _loss_scale[-1](tensors[0] if isinstance(tensors, (list, tuple)) else tensors)
    result = call(tensors)
    for sink in list(_sinks):
        sink.after_backward(tensors, inputs, result if gives else None, direct)
    return result


def _tap_backward(backward: Callable[..., Any]) -> Callable[..., Any]:
    def tapped(tensors: Any, grad_tensors: Any = None, *args: Any, **kwargs: Any) -> Any:
        def call(t: Any) -> Any:
            return backward(t, grad_tensors, *args, **kwargs)

        scaled = grad_tensors is None
        return _around(tensors, kwargs.get("inputs"), _direct(3), call, scaled=scaled, gives=False)

    return tapped


def _tap_grad(grad: Callable[..., Any]) -> Callable[..., Any]:
    def tapped(outputs: Any, inputs: Any = None, *args: Any, **kwargs: Any) -> Any:
        if inputs is None and "inputs" in kwargs:
            inputs = kwargs.pop("inputs")

        def call(o: Any) -> Any:
            return grad(o, inputs, *args, **kwargs)

        return _around(outputs, inputs, _direct(3), call, scaled=False, gives=True)

    return tapped


def _tap_optimizer_init(init: Callable[..., Any]) -> Callable[..., Any]:
    def tapped(self: Optimizer, *args: Any, **kwargs: Any) -> None:
        _optimizers.add(self)
        init(self, *args, **kwargs)

    return tapped


_PATCHES = (
    Patch(torch.autograd, "backward", _tap_backward),
    Patch(torch.autograd, "grad", _tap_grad),
    Patch(Optimizer, "__init__", _tap_optimizer_init),
)


def _optimizer_params() -> list[Tensor]:
    return [p for opt in list(_optimizers) for g in opt.param_groups for p in g["params"]]


def optimizer_grads() -> dict[int, int]:
    """id(parameter) -> id(its gradient) for every live optimizer's parameters."""
    return {id(p): id(p.grad) for p in _optimizer_params()} if _optimizers else {}


def held_by_optimizer(tensors: list[Tensor], grads_before: dict[int, int]) -> bool:
    """Whether a live ``torch.optim`` optimizer (made while a run was open, or watched) takes
    this backward's gradients: it holds one of ``tensors``, or one of its parameters got a
    new gradient during the call (FSDP2: the graph's leaves are unsharded copies, the
    optimizer's parameters get the reduced gradients). Then its ``step()`` counts the
    steps, not ``backward()``. An optimizer left over from earlier work holds neither."""
    if not _optimizers:
        return False
    ids = {id(t) for t in tensors}
    return any(
        id(p) in ids or id(p.grad) != grads_before.get(id(p), id(None)) for p in _optimizer_params()
    )


def note_optimizer(optimizer: Optimizer) -> None:
    """An optimizer made before the tap (``gradoc.watch(model, optimizer)``)."""
    _optimizers.add(optimizer)


def _sync() -> None:
    """The taps are installed exactly while something uses them."""
    for patch in _PATCHES:
        if _sinks or _loss_scale:
            patch.install()
        else:
            patch.remove()


def add_loss_sink(sink: LossSink) -> None:
    if sink not in _sinks:
        _sinks.append(sink)
    _sync()


def remove_loss_sink(sink: LossSink) -> None:
    if sink in _sinks:
        _sinks.remove(sink)
    _sync()


@contextlib.contextmanager
def scaling_losses(scale: Callable[[Tensor], Tensor]) -> Iterator[None]:
    """Within the block, a scalar loss handed to ``backward()`` with no ``grad_tensors`` is
    replaced by ``scale(loss)``: ``gradoc amp-compare`` simulates fp16 loss scaling in its
    own child process with it. The one place the taps change what PyTorch computes."""
    _loss_scale.append(scale)
    _sync()
    try:
        yield
    finally:
        _loss_scale.remove(scale)
        _sync()


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
