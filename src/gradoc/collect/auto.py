"""Attach to every optimizer a script creates, with no change to the script (``gradoc run``).

A :class:`~gradoc.collect.models.ModelFinder` remembers which modules ran, and an
optimizer step pre-hook, on the first step of an optimizer it has not seen, attaches the
run to the models it trains (the outermost modules that ran and own its parameters).
From then on the global step hooks route every step to the run.
"""

from __future__ import annotations

from typing import Any

from torch.optim import Optimizer
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

from .._wrappers import quiet_compile_warning
from .models import ModelFinder
from .run import Run


class AutoAttach:
    def __init__(self, run: Run) -> None:
        self.run = run
        quiet_compile_warning()
        self._finder = ModelFinder()
        run.find_owners = self._finder.owners_of
        self._handles = [
            register_optimizer_step_pre_hook(self._pre),
            register_optimizer_step_post_hook(self._post),
        ]

    def _pre(self, optimizer: Optimizer, args: Any, kwargs: Any) -> Any:
        if self.run.closed:
            return None
        attach = None
        if not self.run.watches(optimizer):
            attach = lambda: self.run.attach(  # noqa: E731
                self._finder.trained_by(optimizer), optimizer, hooks=False
            )
        return self.run.before_step(optimizer, args, kwargs, attach)

    def _post(self, optimizer: Optimizer, args: Any, kwargs: Any) -> None:
        if not self.run.closed:
            self.run.post_step(optimizer)

    def remove(self) -> None:
        self._finder.remove()
        for h in self._handles:
            h.remove()
        self._handles.clear()
