"""The locate probe: at the first non-finite step, ask the locator where the value was born.

Each forward of a watched root is kept for a replay (see ``locating``); the step whose
vitals came back non-finite is replayed (a step given a closure, LBFGS, through its
closure). Updates that made a weight matrix huge are noted on the way: such an update is
the cause of the overflow that follows it.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

import torch.nn as nn
from torch import Tensor

from ..._util.json_types import JsonObject
from ..._util.state import RngState
from ...detect.finding import Origin, Reading
from ...detect.signals import update_ratio
from ...locate.replay import rerun_closure
from ...store import EventKind
from ..probe import Probe
from .grads import Slices, WatchedOptimizer, lr_of

if TYPE_CHECKING:
    from ...guard import Vitals
    from ..context import Context


class Locate(Probe):
    wants_rng = True

    def __init__(self, run: Context) -> None:
        self.run = run
        self.locator = run.locator
        self._update_ratios: dict[str, tuple[int, float]] = {}

    def on_forward(
        self, root: nn.Module, args: Any, kwargs: Any, output: Any, rng: RngState
    ) -> None:
        self.locator.on_forward(root, args, kwargs, rng)
        # a step whose gradients go unread at its statistics point (a lean one) is never
        # replayed backward: a NaN born there is found a step late (``_unread``)
        steps = self.run.steps
        self.locator.on_output(root, output, backward=steps.reads_grads(steps.count))

    def decided(self, target: WatchedOptimizer, vitals: Vitals) -> None:
        try:
            self._locate(target, vitals.bad, vitals.loss_bad)
        except Exception as exc:
            self.locator.done = True
            self.run.event(
                EventKind.LOCATE_FAILED, f"could not locate the origin: {type(exc).__name__}: {exc}"
            )

    def _locate(self, target: WatchedOptimizer, bad: bool, loss_bad: bool) -> None:
        run = self.run
        params: list[tuple[str, str, Any]] = []
        context: dict[str, Any] = {}
        if bad:  # what a replay needs, gathered only when there is one to make
            params = [
                (w.name, w.module, w.param) for t in run.steps.targets.values() for w in t.params
            ]
            lr = lr_of(target.optimizer.param_groups[0])
            context = {"learning rate": lr} if isinstance(lr, float) and math.isfinite(lr) else {}
        late = self._unread(target) if bad else None
        rerun = None
        if bad and run.steps.rerun is not None:
            closure, rng = run.steps.rerun
            roots = list(run.watched.prefixes)
            rerun = functools.partial(
                rerun_closure, target.steps, closure, rng, roots, run.watched.names, params
            )
        origin = self.locator.step(
            target.steps,
            bad,
            loss_bad,
            params,
            context,
            self._update_ratios,
            rerun,
            None if target.manual else target.optimizer,
            updated=target.manual,
            late=late,
        )
        if origin is not None:
            run.record_origin(origin)

    def _unread(self, target: WatchedOptimizer) -> Origin | None:
        """The step before, when its gradients went unread (a lean step) and were non-finite:
        the value was born in that step's backward, and this step's loss is its consequence
        (the update wrote it into the weights). Said as an event at that step, the step a
        re-run traces."""
        found = target.unread_nonfinite()
        if found is None:
            return None
        step, bad = found
        names = list(bad)
        message = (
            f"{sum(bad.values())} non-finite gradient values at step {step}, read at step "
            f"{step + 1} (its gradients were not read at their step: the lean cadence)"
        )
        self.run.event(EventKind.NONFINITE_GRAD, message, step=step)
        return Origin(
            phase="backward",
            step=step,
            late=True,
            evidence=[
                Reading(
                    f"parameters whose step-{step} gradients held non-finite values",
                    len(bad),
                    {"names": names[:10]},
                ),
                Reading(f"non-finite values in the gradient of {names[0]}", bad[names[0]]),
            ],
            note=(
                f"the gradients of step {step} were not read at their step (on steps this "
                "short they are read every few steps); the next step's loss came back "
                "non-finite, and what their update left (the optimizer's moments, else the "
                f"weights) was too: the value was born in step {step}'s backward, and its "
                "update wrote it into the weights"
            ),
        )

    def late(self, step: int, now: int, loss_bad: bool) -> None:
        try:
            params = [
                (w.name, w.module, w.param)
                for t in self.run.steps.targets.values()
                for w in t.params
            ]
            origin = self.locator.late(step, now, loss_bad, params)
        except Exception as exc:
            self.locator.done = True
            message = f"could not locate the origin: {type(exc).__name__}: {exc}"
            self.run.event(EventKind.LOCATE_FAILED, message)
            return
        if origin is not None:
            self.run.record_origin(origin)

    def received(self, sl: Slices, host: Tensor) -> None:
        """Keep the update/weight ratio of weight matrices an update made huge (host values
        we have anyway)."""
        if sl.updates is None:
            return
        values = host[sl.updates].tolist()
        n = len(sl.present)
        # NOTE: only updates that made the weights huge count (update RMS > 100; healthy
        # weights ~0.01-1), so a zero-initialised matrix's first update does not. An RMS
        # over 100 needs a norm over 100: one pass without a call per tensor finds those.
        for i in [i for i, update in enumerate(values[n:]) if update > 100]:
            w = sl.present[i]
            weight, update = values[i], values[n + i]  # weight: before the update
            rms = update / math.sqrt(max(1, w.param.numel()))
            ratio = update_ratio(update, weight)
            if w.param.dim() >= 2 and rms > 100 and ratio is not None:
                self._update_ratios[w.name] = (sl.step, ratio)

    def close(self, step: int) -> JsonObject:
        """What is still unlocated (a value born outside the model, traced since)."""
        if self.run.broken:
            return {}
        try:
            origin = self.locator.close(step)
            if origin is not None:
                self.run.record_origin(origin)
        except Exception as exc:  # the report matters more than the origin
            self.run.event(EventKind.LOCATE_FAILED, f"could not locate the origin: {exc}")
        return {}
