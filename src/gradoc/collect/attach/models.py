"""Which modules a program trains, found from what ran: the one definition, used by
``gradoc run`` (attaching to every optimizer), the checkpointing planner and amp-compare.

A global forward pre-hook remembers every module that ran with gradients enabled; the
model an optimizer trains is then the outermost of them (not inside another that ran)
owning some of its parameters. Outermost among the modules that *ran*, not among the
module tree: a model held by a plain attribute of another module, or called by a function,
is still found.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
import torch.nn as nn
from torch.optim import Optimizer

from ..._util import entry, objects
from ..._util.wrappers import compiling, traced


class ModelFinder:
    """While installed, remembers the modules that ran (and, with ``calls``, the arguments
    of each one's last call)."""

    def __init__(self, *, calls: bool = False) -> None:
        self._ran: dict[int, weakref.ref[nn.Module]] = {}
        self._calls: dict[int, tuple[tuple[Any, ...], dict[str, Any]]] | None = (
            {} if calls else None
        )
        self._handles: list[Any] = []
        self._with_calls = calls
        self.resume()

    def resume(self) -> None:
        """Watch the modules that run (again: see :meth:`pause`)."""
        if self._handles:
            return
        self._handles = [entry.every_forward_pre_hook(self._saw)]
        if self._with_calls:
            self._handles.append(entry.every_forward_hook(self._called, with_kwargs=True))

    def pause(self) -> None:
        """Stop watching, keeping what was seen: a global hook sends every module call of
        the process down ``nn.Module``'s slow path (a few us each: ~5% of a small model's
        step), so it is removed once nothing is left to find."""
        self.remove()

    def _saw(self, module: nn.Module, args: Any) -> None:
        if compiling() or not torch.is_grad_enabled():
            return  # inside a compiled model: its wrapper, called eagerly, was seen
        # (a module run under torch.func, vmap's functional_call, ran: it is recorded)
        ref = self._ran.get(id(module))
        if ref is None or ref() is not module:
            self._ran[id(module)] = weakref.ref(module)

    def _called(self, module: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        if self._calls is not None and not traced() and torch.is_grad_enabled():
            self._calls[id(module)] = (args, kwargs)

    def owners_of(self, wanted: set[int]) -> list[nn.Module]:
        """The outermost modules that ran and own some of the tensors ``wanted`` (ids)."""
        ran = [m for m in (r() for r in self._ran.values()) if m is not None]
        inner = {id(c) for m in ran for c in objects.modules(m) if c is not m}
        return [
            m
            for m in ran
            if id(m) not in inner and any(id(p) in wanted for p in objects.parameters(m))
        ]

    def trained_by(self, optimizer: Optimizer) -> list[nn.Module]:
        """The models ``optimizer`` trains (see :meth:`owners_of`)."""
        return self.owners_of({id(p) for g in optimizer.param_groups for p in g["params"]})

    def last_call(self, module: nn.Module) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """The arguments of the module's last call (with ``calls=True``)."""
        return self._calls.get(id(module)) if self._calls is not None else None

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
