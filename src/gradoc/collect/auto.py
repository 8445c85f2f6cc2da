"""Attach to every optimizer a script creates, with no change to the script (``gradoc run``).

Two global hooks do it: a module forward pre-hook remembers which modules ran, and an
optimizer step pre-hook, on the first step of an optimizer it has not seen, finds the
outermost modules that ran and own that optimizer's parameters, and attaches the run
to them. From then on the global step hooks route every step to the run.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
import torch.nn as nn
from torch.optim import Optimizer
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

from .._wrappers import compiling, quiet_compile_warning
from .run import Run


class AutoAttach:
    def __init__(self, run: Run) -> None:
        self.run = run
        self._ran: dict[int, weakref.ref[nn.Module]] = {}
        quiet_compile_warning()
        run.find_owners = self.owners_of
        self._handles = [
            nn.modules.module.register_module_forward_pre_hook(self._saw),
            register_optimizer_step_pre_hook(self._pre),
            register_optimizer_step_post_hook(self._post),
        ]

    def _saw(self, module: nn.Module, args: Any) -> None:
        if compiling():  # inside a compiled model: its wrapper, called eagerly, was seen
            return
        ref = self._ran.get(id(module))
        if (ref is None or ref() is not module) and torch.is_grad_enabled():
            self._ran[id(module)] = weakref.ref(module)

    def _owners(self, optimizer: Optimizer) -> list[nn.Module]:
        """The outermost modules that ran and own at least one of the optimizer's parameters."""
        return self.owners_of({id(p) for g in optimizer.param_groups for p in g["params"]})

    def _pre(self, optimizer: Optimizer, args: Any, kwargs: Any) -> Any:
        if self.run.closed:
            return None
        attach = None
        if not self.run.watches(optimizer):
            attach = lambda: self.run.attach(self._owners(optimizer), optimizer, hooks=False)  # noqa: E731
        return self.run.before_step(optimizer, args, kwargs, attach)

    def owners_of(self, wanted: set[int]) -> list[nn.Module]:
        """The outermost modules that ran and own some of the tensors ``wanted`` (ids)."""
        ran = [m for m in (r() for r in self._ran.values()) if m is not None]
        inner = {id(c) for m in ran for c in m.modules() if c is not m}
        return [
            m for m in ran if id(m) not in inner and any(id(p) in wanted for p in m.parameters())
        ]

    def _post(self, optimizer: Optimizer, args: Any, kwargs: Any) -> None:
        if not self.run.closed:
            self.run.post_step(optimizer)

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
