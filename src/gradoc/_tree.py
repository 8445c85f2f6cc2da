"""The tensors inside a module's arguments or outputs (tuples, lists, dicts, and any type
registered with ``torch.utils._pytree``, such as Hugging Face's ``ModelOutput``)."""

from __future__ import annotations

import inspect
import weakref
from typing import Any

from torch import Tensor
from torch.utils._pytree import tree_flatten


def tensors(tree: Any) -> list[Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, Tensor)]


def floats(tree: Any) -> list[Tensor]:
    return [t for t in tensors(tree) if t.is_floating_point()]


_signatures: weakref.WeakKeyDictionary[Any, inspect.Signature | None] = weakref.WeakKeyDictionary()


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
