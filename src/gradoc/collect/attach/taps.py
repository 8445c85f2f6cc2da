"""Process-wide taps: the one place gradoc wraps PyTorch entry points.

While at least one run is open, these are wrapped, so that gradoc sees what the program
computes with no change to the training loop:

- ``torch.autograd.backward`` (which ``Tensor.backward`` calls) and ``torch.autograd.grad``:
  the loss, and the steps of a program that trains without ``torch.optim``;
- ``torch.optim.Optimizer.__init__``: whether any optimizer exists;
- how a program reads a scalar it computed (``Tensor.item``, ``float(t)``, ``f"{t}"``,
  ``torch.isfinite`` / ``isnan`` / ``isinf`` and their methods): a loss checked or printed
  that never reaches ``backward()`` (``if not torch.isfinite(loss): break``);
- ``torch.nn.utils.clip_grad_norm_`` / ``clip_grad_value_`` (through
  ``clip_grad._clip_grads_with_norm_`` where PyTorch has it, so any import of
  ``clip_grad_norm_`` is seen) and ``torch.amp.GradScaler``'s ``scale``, ``unscale_`` and
  ``step``: the gradients before the program clips them, the clipping itself, the loss
  before scaling, and a step the scaler skipped.

The wrappers only hand what they see to the open runs (:class:`TapReceiver`); they never change
what PyTorch does or returns, and compose with wrappers of the same functions installed by
others (see ``signals.patch``): this is the only wrapper of them in gradoc.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
import torch.nn.utils.clip_grad as _clip_grad
from torch import Tensor
from torch.optim import Optimizer

from ..._util.json_types import JsonObject
from ..._util.objects import WeakIdMap, WeakIdSet
from ..._util.patch import Patch
from ..._util.wrappers import traced
from ...locate.origin import user_line
from ..graph import loss_like


class TapReceiver:
    """What the taps tell an open run (every method a no-op here)."""

    def on_backward(
        self, tensors: Any, inputs: Any = None, direct: bool = True, gradients: Any = None
    ) -> None:
        """A ``backward()`` / ``autograd.grad`` call begins (``direct``: the program's own;
        ``gradients``: the ``grad_tensors`` / ``grad_outputs`` it was given)."""

    def after_backward(self, tensors: Any, inputs: Any, grads: Any, direct: bool) -> None:
        """... and returned (``grads``: what ``autograd.grad`` gave)."""

    def on_value(self, tensor: Tensor, value: float | None, how: str) -> None:
        """The program read a scalar with an autograd graph (a loss, most likely): its
        value when the read gave it and it is not finite (``item()``), else None (the
        program asked ``torch.isfinite(loss)``)."""

    def on_scaled(self, loss: Tensor, scaled: Tensor) -> None:
        """A GradScaler scaled ``loss`` into ``scaled`` (which goes to backward())."""

    def on_grads_ready(self, optimizer: Optimizer | None, params: list[Tensor]) -> None:
        """The gradients are about to be clipped, or were just unscaled: final as the
        backward produced them (``optimizer`` when known, else the ``params``)."""

    def on_clip(self, kind: str, threshold: float, measured: Tensor, norm_type: float) -> None:
        """The program clipped its gradients: ``kind`` (``clip_grad_norm_`` or
        ``clip_grad_value_``) at ``threshold``; ``measured`` (on the device) is the norm it
        measured before clipping (the largest absolute value for value clipping)."""

    def after_scaler_step(self, optimizer: Optimizer) -> None:
        """``GradScaler.step(optimizer)`` returned (it skips ``optimizer.step()`` when it
        found an inf or NaN gradient)."""


_receivers: list[TapReceiver] = []
raw_item = Tensor.item
"""``Tensor.item`` as PyTorch has it: gradoc's own reads pass no tap."""
_optimizers: WeakIdSet[Optimizer] = WeakIdSet()


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
    gradients: Any,
    gives: bool,
) -> Any:
    """One tapped call, ``call(tensors)``: the receivers hear of it before and after.
    ``gradients``: what the call was given to start from (None: a loss's 1; amp-compare's
    loss scaling applies, to ``backward()``); ``gives``: the result is the gradients
    (``autograd.grad``), which the receivers are handed."""
    # the gradients a backward() starts from make what it computes a loss (``handed``); an
    # autograd.grad's (a gradient penalty's grad_outputs=ones) make none: it is no step's loss
    given = None if gives else gradients
    for receiver in list(_receivers):
        receiver.on_backward(tensors, inputs, direct, given)
    scaled = gradients is None and not gives
    if _loss_scale and scaled and scalar_loss(tensors) is not None:
        tensors = _loss_scale[-1](tensors[0] if isinstance(tensors, (list, tuple)) else tensors)
    result = call(tensors)
    for receiver in list(_receivers):
        receiver.after_backward(tensors, inputs, result if gives else None, direct)
    return result


def _tap_backward(backward: Callable[..., Any]) -> Callable[..., Any]:
    def tapped(tensors: Any, grad_tensors: Any = None, *args: Any, **kwargs: Any) -> Any:
        def call(t: Any) -> Any:
            return backward(t, grad_tensors, *args, **kwargs)

        inputs = kwargs.get("inputs")
        return _around(tensors, inputs, _direct(3), call, gradients=grad_tensors, gives=False)

    return tapped


def _tap_grad(grad: Callable[..., Any]) -> Callable[..., Any]:
    def tapped(outputs: Any, inputs: Any = None, *args: Any, **kwargs: Any) -> Any:
        if inputs is None and "inputs" in kwargs:
            inputs = kwargs.pop("inputs")

        def call(o: Any) -> Any:
            return grad(o, inputs, *args, **kwargs)

        given = args[0] if args else kwargs.get("grad_outputs")
        return _around(outputs, inputs, _direct(3), call, gradients=given, gives=True)

    return tapped


new_optimizer: list[Callable[[], None]] = []
"""Called when an optimizer is made (``gradoc run`` looks for its model again)."""


_born_at: WeakIdMap[Optimizer, JsonObject] = WeakIdMap()
"""Where the program constructed each optimizer made while the taps were in (``gradoc run``):
the file, line and code of the call (a learning-rate fix's edit goes there)."""


def born_at(optimizer: Optimizer) -> JsonObject | None:
    """Where ``optimizer`` was constructed, when the taps saw it made."""
    return _born_at.get(optimizer)


def _tap_optimizer_init(init: Callable[..., Any]) -> Callable[..., Any]:
    def tapped(self: Optimizer, *args: Any, **kwargs: Any) -> None:
        _optimizers.add(self)
        if self not in _born_at:  # the user's line that made it (a subclass calls this)
            at = user_line()
            if at is not None:
                _born_at[self] = at
        init(self, *args, **kwargs)
        for listener in list(new_optimizer):
            listener()

    return tapped


def _tell_value(t: Tensor, value: float | None, how: str) -> None:
    if traced():  # traced by torch.compile: a fake tensor, and no side effect to freeze
        return
    for receiver in list(_receivers):
        receiver.on_value(t, value, how)


def _tap_read(how: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``item()`` / ``float(t)``: the value comes back; a non-finite one is told."""

    def make(read: Callable[..., Any]) -> Callable[..., Any]:
        def tapped(self: Tensor) -> Any:
            value = _warning_at_caller(read, self) if self.requires_grad else read(self)
            if self.grad_fn is not None and isinstance(value, float) and not math.isfinite(value):
                _tell_value(self, value, how)
            return value

        return tapped

    return make


def _warning_at_caller(read: Callable[..., Any], t: Tensor) -> Any:
    """``read(t)`` whose warnings name the program's line, as without the tap: PyTorch
    warns about ``float()`` of a tensor that requires grad at the Python frame that called
    it, which would be the tap (and, warned once per line, only once per run)."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = read(t)
    for w in caught:  # the tap and Patch's switch sit between the program and PyTorch
        warnings.warn(w.message, stacklevel=4)
    return value


def _tap_format(fmt: Callable[..., Any]) -> Callable[..., Any]:
    """``f"{loss:.4f}"`` formats the value of a detached copy (no ``item()`` of the loss
    itself): the text says whether it was finite, with no second read."""

    def tapped(self: Tensor, spec: str) -> Any:
        text = fmt(self, spec)
        if self.grad_fn is not None and isinstance(text, str) and text.strip().lower() in _BAD:
            _tell_value(self, float(text), "printed with a format string")
        return text

    return tapped


_BAD = ("nan", "inf", "-inf", "+inf", "-nan")


def _tap_check(how: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``torch.isfinite(loss)`` and its kind: the program is about to look at the value."""

    def make(check: Callable[..., Any]) -> Callable[..., Any]:
        def tapped(t: Any, *args: Any, **kwargs: Any) -> Any:
            if loss_like(t):
                _tell_value(t, None, how)
            return check(t, *args, **kwargs)

        return tapped

    return make


def _tap_scale(scale: Callable[..., Any]) -> Callable[..., Any]:
    def tapped(self: Any, outputs: Any) -> Any:
        scaled = scale(self, outputs)
        if isinstance(outputs, Tensor) and isinstance(scaled, Tensor) and scaled is not outputs:
            for receiver in list(_receivers):
                receiver.on_scaled(outputs, scaled)
        return scaled

    return tapped


def _tap_unscale(unscale: Callable[..., Any]) -> Callable[..., Any]:
    def tapped(self: Any, optimizer: Optimizer) -> Any:
        result = unscale(self, optimizer)
        if getattr(self, "_enabled", False):  # the gradients are in their true units now
            for receiver in list(_receivers):
                receiver.on_grads_ready(optimizer, [])
        return result

    return tapped


def _tap_scaler_step(step: Callable[..., Any]) -> Callable[..., Any]:
    def tapped(self: Any, optimizer: Optimizer, *args: Any, **kwargs: Any) -> Any:
        result = step(self, optimizer, *args, **kwargs)
        for receiver in list(_receivers):
            receiver.after_scaler_step(optimizer)
        return result

    return tapped


def _params(parameters: Any) -> list[Tensor]:
    return [parameters] if isinstance(parameters, Tensor) else list(parameters)


def _tap_clip_with_norm(clip: Callable[..., Any]) -> Callable[..., Any]:
    """``clip_grads_with_norm_(parameters, max_norm, total_norm)``, which
    ``clip_grad_norm_`` calls after measuring the norm and before scaling the gradients."""

    def tapped(parameters: Any, max_norm: float, total_norm: Tensor, *args: Any, **kw: Any) -> Any:
        params = _params(parameters)
        for receiver in list(_receivers):
            receiver.on_grads_ready(None, params)
            receiver.on_clip("clip_grad_norm_", float(max_norm), total_norm, math.nan)
        return clip(params, max_norm, total_norm, *args, **kw)

    return tapped


def _tap_clip_norm(clip: Callable[..., Any]) -> Callable[..., Any]:
    """``clip_grad_norm_`` itself, on a PyTorch without ``_clip_grads_with_norm_``."""

    def tapped(parameters: Any, max_norm: float, norm_type: float = 2.0, *a: Any, **kw: Any) -> Any:
        params = _params(parameters)
        for receiver in list(_receivers):
            receiver.on_grads_ready(None, params)
        total = clip(params, max_norm, norm_type, *a, **kw)
        for receiver in list(_receivers):
            receiver.on_clip("clip_grad_norm_", float(max_norm), total, float(norm_type))
        return total

    return tapped


def _tap_clip_value(clip: Callable[..., Any]) -> Callable[..., Any]:
    def tapped(parameters: Any, clip_value: float, *args: Any, **kwargs: Any) -> Any:
        params = _params(parameters)
        if _receivers:
            grads = [p.grad for p in params if p.grad is not None]
            with torch.no_grad():
                largest = (
                    torch.stack([g.detach().abs().amax().float() for g in grads]).amax()
                    if grads
                    else torch.zeros(())
                )
            for receiver in list(_receivers):
                receiver.on_grads_ready(None, params)
                receiver.on_clip("clip_grad_value_", float(clip_value), largest, math.nan)
        return clip(params, clip_value, *args, **kwargs)

    return tapped


def _listed(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A clip's ``parameters`` (``model.parameters()``: a generator) as a list, which the tap
    reads and PyTorch's clip takes alike."""
    if args and not isinstance(args[0], Tensor):
        return (list(args[0]), *args[1:]), kwargs
    if "parameters" in kwargs and not isinstance(kwargs["parameters"], Tensor):
        return args, {**kwargs, "parameters": list(kwargs["parameters"])}
    return args, kwargs


def _clip_patches() -> tuple[Patch, ...]:
    """Clipping as PyTorch writes it: ``clip_grad_norm_`` calls the module's
    ``_clip_grads_with_norm_`` (PyTorch >= 2.6), so tapping that sees every import of
    ``clip_grad_norm_``; an older PyTorch has ``clip_grad_norm_`` tapped where it is
    reached (``torch.nn.utils`` and its ``clip_grad`` module)."""
    utils = torch.nn.utils
    found: list[Patch] = []
    if hasattr(_clip_grad, "_clip_grads_with_norm_"):
        found.append(Patch(_clip_grad, "_clip_grads_with_norm_", _tap_clip_with_norm, _listed))
        if hasattr(utils, "clip_grads_with_norm_"):
            found.append(Patch(utils, "clip_grads_with_norm_", _tap_clip_with_norm, _listed))
    else:  # pragma: no cover - PyTorch < 2.6
        found += [Patch(m, "clip_grad_norm_", _tap_clip_norm, _listed) for m in (utils, _clip_grad)]
    found += [Patch(m, "clip_grad_value_", _tap_clip_value, _listed) for m in (utils, _clip_grad)]
    return tuple(found)


_SCALER = torch.amp.GradScaler
_CHECKS = ("isfinite", "isnan", "isinf")

_PATCHES = (
    Patch(torch.autograd, "backward", _tap_backward),
    Patch(torch.autograd, "grad", _tap_grad),
    Patch(Optimizer, "__init__", _tap_optimizer_init),
    Patch(Tensor, "__float__", _tap_read("read with float(loss)")),
    Patch(Tensor, "__format__", _tap_format),
    *(Patch(torch, f, _tap_check(f"checked with torch.{f}(loss)")) for f in _CHECKS),
    *(Patch(Tensor, f, _tap_check(f"checked with loss.{f}()")) for f in _CHECKS),
    Patch(_SCALER, "scale", _tap_scale),
    Patch(_SCALER, "unscale_", _tap_unscale),
    Patch(_SCALER, "step", _tap_scaler_step),
    *_clip_patches(),
)
_ITEM = Patch(Tensor, "item", _tap_read("read with loss.item()"))
"""``item()`` is called once per parameter inside an optimizer's step (Adam's step
counts): it passes through while a watched optimizer steps (see :func:`reading_items`)."""
_items_on = [True]


def param_ids(optimizers: Iterable[Optimizer]) -> set[int]:
    """The ids of the parameters ``optimizers`` hold."""
    return {id(p) for opt in optimizers for g in opt.param_groups for p in g["params"]}


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
        if _receivers or _loss_scale:
            patch.install()
        else:
            patch.remove()
    if _receivers:
        _ITEM.install()
        _ITEM.switch(_items_on[0])
    else:
        _ITEM.remove()


def reading_items(on: bool) -> None:
    """``item()`` tapped (on) or not: a pass-through while a watched optimizer steps, so that
    its per-parameter ``item()`` calls pay one Python call each, not the tap's checks. The
    wrapper stays installed (see ``Patch.switch``)."""
    if _items_on[0] != on:
        _items_on[0] = on
        if _receivers:
            _ITEM.switch(on)


def live_optimizers() -> list[Optimizer]:
    """The optimizers made while a tap was installed (or watched) that are still alive."""
    return list(_optimizers)


def optimizer_of(params: list[Tensor]) -> Optimizer | None:
    """The live optimizer holding one of ``params`` (the first found)."""
    ids = {id(p) for p in params}
    for opt in list(_optimizers):
        if any(id(p) in ids for g in opt.param_groups for p in g["params"]):
            return opt
    return None


def add_receiver(receiver: TapReceiver) -> None:
    if receiver not in _receivers:
        _receivers.append(receiver)
    _sync()


def remove_receiver(receiver: TapReceiver) -> None:
    if receiver in _receivers:
        _receivers.remove(receiver)
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


def is_scalar_loss(tensors: Any) -> bool:
    """backward()'s arguments are a loss (see :func:`scalar_loss`), told without an op."""
    if isinstance(tensors, (list, tuple)) and len(tensors) == 1:
        tensors = tensors[0]
    return isinstance(tensors, Tensor) and tensors.numel() == 1 and tensors.is_floating_point()


def handed(tensors: Any, gradients: Any) -> list[tuple[Tensor, Tensor | None]]:
    """What a ``backward()`` that is not of one scalar loss computes the gradient of, as
    losses: each scalar of a list (``torch.autograd.backward([l1, l2])``: their sum), a
    tensor with the gradient it was given (``out.backward(g)``: the loss ``(out * g).sum()``,
    its value computed here, with no graph); ``[]`` for anything else. (tensor, value)."""
    many = list(tensors) if isinstance(tensors, (list, tuple)) else [tensors]
    if gradients is None:
        given: list[Any] = [None] * len(many)
    else:
        given = list(gradients) if isinstance(gradients, (list, tuple)) else [gradients]
    if len(given) != len(many) or not all(
        isinstance(t, Tensor) and t.is_floating_point() and t.grad_fn is not None for t in many
    ):
        return []
    out: list[tuple[Tensor, Tensor | None]] = []
    with torch.no_grad():
        for t, g in zip(many, given):
            if isinstance(g, Tensor) and g.shape == t.shape:
                out.append((t, (t.detach() * g).sum().reshape(())))
            elif g is None and t.numel() == 1:
                out.append((t, None))
            else:
                return []
    return out


def scalar_loss(tensors: Any) -> Tensor | None:
    """The loss among backward()'s arguments: a single floating-point scalar, else None."""
    if isinstance(tensors, (list, tuple)) and len(tensors) == 1:
        tensors = tensors[0]
    if isinstance(tensors, Tensor) and tensors.numel() == 1 and tensors.is_floating_point():
        return tensors.detach().reshape(())
    return None
