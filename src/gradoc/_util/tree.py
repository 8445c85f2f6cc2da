"""The tensors inside a module's arguments or outputs (tuples, lists, dicts, and any type
registered with ``torch.utils._pytree``, such as Hugging Face's ``ModelOutput``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from torch import Tensor
from torch.utils._pytree import tree_flatten

from .objects import WeakIdMap


def tensors(tree: Any) -> list[Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, Tensor)]


def output_loss(output: Any, like: Callable[[Any], bool] | None = None) -> Tensor | None:
    """The loss a model returned with its outputs: ``output.loss`` / ``output["loss"]``
    (Hugging Face's ``ModelOutput``), the first tensor of a tuple of outputs that looks like
    one (nanoGPT's ``logits, loss``), or the output itself; a loss looks ``like`` says
    (default: a one-element tensor)."""
    like = like or _one_element
    if isinstance(output, (tuple, list)):
        return next((o for o in output if like(o)), None)
    loss = output if isinstance(output, Tensor) else getattr(output, "loss", None)
    if loss is None and isinstance(output, dict):
        loss = output.get("loss")
    return loss if like(loss) else None


def _one_element(t: Any) -> bool:
    return isinstance(t, Tensor) and t.numel() == 1


def floats(tree: Any) -> list[Tensor]:
    return [t for t in tensors(tree) if t.is_floating_point()]


_signatures: WeakIdMap[Any, inspect.Signature | None] = WeakIdMap()


def arguments(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """A call's arguments by the names of ``module.forward``'s parameters (positional ones
    named ``input 0``, ... when the signature cannot bind them). The signature is computed
    once per module: this runs on every forward."""
    if module not in _signatures:
        try:
            _signatures[module] = inspect.signature(module.forward)
        except (TypeError, ValueError):
            _signatures[module] = None
    sig = _signatures[module]
    if sig is not None:
        try:
            return dict(sig.bind_partial(*args, **kwargs).arguments)
        except TypeError:
            pass
    return {f"input {i}": a for i, a in enumerate(args)} | kwargs
