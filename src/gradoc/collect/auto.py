"""Attach to every optimizer a script creates, with no change to the script (``gradoc run``).

A :class:`~gradoc.collect.attach.models.ModelFinder` remembers which modules ran, and an
optimizer step pre-hook, on the first step of an optimizer it has not seen, attaches the
run to the models it trains (the outermost modules that ran and own its parameters).
From then on the global step hooks route every step to the run.

The first step's forward ran before its model was known: :class:`EarlyCalls` keeps the
outermost calls made until then (their inputs, output and the RNG state before them), and
the model adopts its own when it is found, as if it had been watched from the start (the
step's batch, its lengths, and a replay of it if its loss is NaN). Module outputs are
summarised meanwhile too (``Activations.watch_early``).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
from torch.optim import Optimizer

from .._util import entry
from .._util.state import RngState, rng_state
from .._util.wrappers import quiet_compile_warning, traced
from .attach import ModelFinder, taps
from .run import Run

Call = tuple[nn.Module, tuple[Any, ...], dict[str, Any], Any, RngState]
"""An outermost module call: (module, args, kwargs, output, RNG state before it)."""
EARLY_CALLS = 16
"""Outermost calls kept at most before the model is known (the newest)."""
EARLY_LIMIT = 1000
"""Outermost calls recorded at most while no model is known (a program that never trains
pays nothing more after them)."""


class EarlyCalls:
    """The outermost module calls made with gradients before the run knew its model."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._count = 0
        self._depth = 0
        self._rng: RngState | None = None
        self._handles = [
            entry.every_forward_pre_hook(self._enter),
            entry.every_forward_hook(self._leave, with_kwargs=True, always_call=True),
        ]

    def _enter(self, module: nn.Module, args: Any) -> None:
        if traced():
            return
        if self._depth == 0 and torch.is_grad_enabled():
            self._rng = rng_state()
        self._depth += 1

    def _leave(self, module: nn.Module, args: Any, *rest: Any) -> None:
        # (kwargs, output); a forward that raised calls a global hook without the kwargs
        # even where it asked for them (torch's Module._call_impl): (output,)
        kwargs, output = rest if len(rest) == 2 else ({}, rest[-1])
        if traced() or self._depth == 0:
            return
        self._depth -= 1
        if self._depth == 0 and self._rng is not None:
            self._count += 1
            if self._count > EARLY_LIMIT:  # no model found after this many: stop looking
                self.remove()
                return
            self.calls = [
                *self.calls[-(EARLY_CALLS - 1) :],
                (module, args, kwargs, output, self._rng),
            ]
            self._rng = None

    def take(self, roots: list[nn.Module]) -> list[Call]:
        """The calls of ``roots`` (they are watched from now on), and stop recording."""
        mine = [c for c in self.calls if any(c[0] is r for r in roots)]
        self.remove()
        return mine

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self.calls = []


class AutoAttach:
    def __init__(self, run: Run) -> None:
        self.run = run
        quiet_compile_warning()
        self._finder = ModelFinder()
        run.find_owners = self._finder.owners_of
        run.attach_early = self._attach
        run.steps.activations.watch_early()  # the first forward comes before the model is found
        self._early: EarlyCalls | None = EarlyCalls()
        run.watched.early = self._take_early
        self._handles = [
            entry.every_step_pre_hook(self._pre),
            entry.every_step_post_hook(self._post),
        ]
        taps.new_optimizer.append(self._finder.resume)  # its model is looked for again

    def _attach(self, optimizer: Optimizer) -> None:
        if not self.run.closed and not self.run.watches(optimizer):
            self.run.attach(self._finder.trained_by(optimizer), optimizer, hooks=False)
            if all(self.run.watches(o) for o in taps.live_optimizers()):
                self._finder.pause()  # every optimizer's model is known

    def _pre(self, optimizer: Optimizer, args: Any, kwargs: Any) -> Any:
        if self.run.closed:
            return None
        attach = None
        if not self.run.watches(optimizer):
            attach = lambda: self._attach(optimizer)  # noqa: E731
        return self.run.before_step(optimizer, args, kwargs, attach)

    def _post(self, optimizer: Optimizer, args: Any, kwargs: Any) -> None:
        if not self.run.closed:
            self.run.post_step(optimizer)

    def _take_early(self, roots: list[nn.Module]) -> list[Call]:
        """The first model found (by an optimizer, or by a program's first ``backward()``)
        adopts its forwards made before."""
        early, self._early = self._early, None
        return early.take(roots) if early is not None else []

    def remove(self) -> None:
        self.run.attach_early = None
        self.run.watched.early = None
        if self._finder.resume in taps.new_optimizer:
            taps.new_optimizer.remove(self._finder.resume)
        if self._early is not None:
            self._early.remove()
            self._early = None
        self._finder.remove()
        for h in self._handles:
            h.remove()
        self._handles.clear()
