"""A step's vital signs (its loss, whether its gradients are finite, their global norm),
read at its statistics point where that costs no waiting, and what the guard decides on
them before the update: skip, clip or roll back (only when a guard was asked for)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Protocol

import torch
from torch.optim import Optimizer

from ...detect.finding import Origin
from ...guard import Guard, Vitals, agree
from ..attach import taps
from ..graph import losses

if TYPE_CHECKING:
    from ..._util.objects import IdMap
    from ..context import InternalWatched
    from ..probe import Points, Probe
    from ..probes import WatchedOptimizer
    from .loss_reading import LossReader
    from .transfers import Transfers


class Checked(Protocol):
    """What the checks read of the run's steps."""

    guard: Guard | None
    device: torch.device | None
    targets: IdMap[Optimizer, WatchedOptimizer]
    probes: list[Probe]
    points: Points
    loss: LossReader
    transfers: Transfers
    watched: InternalWatched
    origins: dict[int, Origin]


class StepChecks:
    def __init__(self, steps: Checked) -> None:
        self.steps = steps

    def guard_asked(self) -> bool:
        """The run was given a guard (not only the default that skips)."""
        return self.steps.guard is not None and self.steps.guard.every_step

    def vet(self, target: WatchedOptimizer, primary: bool) -> None:
        """The first non-finite step is located; the guard (or the default skip) acts."""
        v = self.vitals(target, primary)
        for decided in self.steps.points.decided:
            decided(target, v)
        if target.manual:
            return  # the program applies its own update: gradoc cannot skip it
        if self.steps.guard is not None:
            self._guard_step(self.steps.guard, target, primary, v)

    def vitals(self, target: WatchedOptimizer, primary: bool) -> Vitals:
        """This step's loss, finiteness and global gradient norm, read now: a few scalars
        (on the CPU a read, not a synchronisation; see ``checks_now``)."""
        micros = self.steps.loss.micros if primary else []
        if self.steps.guard is None and self._fine(micros, target):
            return Vitals(False, False, None, None)
        norms_ = target.grad_norms
        wants_norm = self.steps.guard is not None and self.steps.guard.needs_norm
        parts = [losses.mean(micros)] if micros else []
        if norms_ is not None:
            # a sum is finite exactly when every term is (or overflows, which is as bad)
            parts.append(norms_.sum())
            if wants_norm:
                wide = torch.float32 if norms_.device.type == "mps" else torch.float64
                parts.append(torch.linalg.vector_norm(norms_.to(wide)))
        if not parts:
            return Vitals(False, False, None, None)
        dtype = torch.float32 if parts[0].device.type == "mps" else torch.float64
        values = torch.stack([p.to(dtype) for p in parts]).tolist()
        loss = values.pop(0) if micros else None
        grads_bad = not math.isfinite(values[0]) if norms_ is not None else False
        norm = values[1] if len(values) > 1 else None
        if grads_bad:
            grads_bad, global_norm = target.recheck(self.steps.device)
            norm = global_norm if norm is not None else None
        loss_bad = loss is not None and not math.isfinite(loss)
        if (loss_bad or grads_bad) and primary:
            self.steps.transfers.bad = True  # its statistics travel at its end, with its counts
        return Vitals(loss_bad, grads_bad, loss, norm)

    def _fine(self, micros: list[losses.Micro], target: WatchedOptimizer) -> bool:
        """Nothing decided on the values: whether the loss and every norm are finite, read
        with as few ops as there can be (this runs every step; a non-finite one is measured
        again by :meth:`vitals`): few norms are read one scalar each, more summed once."""
        now = target.now
        found = now.norms if now is not None else None
        values = [m.host if m.host is not None else taps.raw_item(m.value) for m in micros]
        if isinstance(found, tuple):
            read = [taps.raw_item(t) for t in found]
            values += read
            if now is not None and found and found[0].is_cpu:
                now.norms = read  # read: they travel as these values (see ``grads``)
        elif isinstance(found, list):
            values += found
        elif found is not None:
            values.append(taps.raw_item(found.sum()))
        # a sum is finite exactly when every term is (or overflows: measured again)
        return math.isfinite(sum(values)) if values else True

    def _guard_step(self, guard: Guard, target: WatchedOptimizer, primary: bool, v: Vitals) -> None:
        if guard.collective:
            v = agree(v, self.steps.device)
        step = target.steps
        d = guard.decide(target.optimizer, step, primary, v)
        if d.skip or d.rollback:
            target.drop_grads()
            if v.bad:
                reason = d.reason if d.skip else "non-finite"
                guard.skipped_step(target.optimizer, step, reason, self.steps.origins.get(step))
        models, optimizers = list(self.steps.watched.prefixes), list(self.steps.targets)
        if d.rollback:
            guard.rollback(d.to, step, d.reason, models, optimizers, d.diverged)
        elif d.clip_to is not None and v.norm is not None:
            grads = [w.param.grad for w in target.present if w.param.grad is not None]
            guard.clip(grads, v.norm, d.clip_to, step)
        if primary and not (d.skip or d.rollback):
            guard.maybe_snapshot(step, models, optimizers)
