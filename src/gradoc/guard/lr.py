"""Learning rates the guard changes: held-back scheduler steps and learning-rate scaling.

PyTorch has no hook on LR schedulers, so while a guard is open the ``step`` methods of
``torch.optim.lr_scheduler``'s classes that define one are wrapped (see ``signals.patch``: a
wrapper someone else put over them survives; restored when the last guard closes). The
wrapper learns which schedulers drive which optimizer (so that :func:`scale_lr` reaches
their base rates), and holds back a scheduler's step after an optimizer step the guard
skipped — but only for schedulers stepped once per optimizer step (their previous call
came right after the previous optimizer step), so a per-epoch scheduler is never held
back. A user subclass that overrides ``step`` without calling the base class is not seen.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from torch import Tensor
from torch.optim import Optimizer, lr_scheduler

from .._util.objects import WeakIdMap, WeakIdSet
from .._util.patch import Patch

LR_KEYS = ("lr", "initial_lr", "max_lr", "min_lr")
"""Param-group entries that are learning rates (OneCycleLR keeps its range in the group)."""
SCHEDULER_LR_ATTRS = ("base_lrs", "max_lrs", "min_lrs", "_last_lr")
"""Scheduler attributes that are learning rates (closed-form schedules start from these)."""


class _Tracker:
    """Per optimizer: its schedulers, its step count, whether its last step was skipped."""

    def __init__(self) -> None:
        self.schedulers: WeakIdSet[Any] = WeakIdSet()
        self.steps = 0
        self.skipped = False
        self.last_call: WeakIdMap[Any, int] = WeakIdMap()


_trackers: WeakIdMap[Optimizer, _Tracker] = WeakIdMap()
_patches: list[Patch] = []
_users = 0


def tracker(optimizer: Optimizer) -> _Tracker:
    t = _trackers.get(optimizer)
    if t is None:
        t = _trackers[optimizer] = _Tracker()
    return t


def _wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        optimizer = getattr(self, "optimizer", None)
        if not isinstance(optimizer, Optimizer):
            return original(self, *args, **kwargs)
        t = tracker(optimizer)
        t.schedulers.add(self)
        previous = t.last_call.get(self)
        t.last_call[self] = t.steps
        if previous is None:  # first seen: per-step when its epoch count kept up
            per_step = getattr(self, "last_epoch", None) == t.steps - 1
        else:
            per_step = previous == t.steps - 1
        if t.skipped and per_step and t.steps > 0:
            return None  # the optimizer step it follows did not happen
        return original(self, *args, **kwargs)

    return step


def install() -> None:
    """Wrap the schedulers' ``step`` (reference-counted: one wrapping for all guards)."""
    global _users
    _users += 1
    if _users > 1:
        return
    if not _patches:
        _patches.extend(
            Patch(cls, "step", _wrap)
            for cls in vars(lr_scheduler).values()
            if inspect.isclass(cls)
            and issubclass(cls, lr_scheduler.LRScheduler)
            and "step" in cls.__dict__
        )
    for patch in _patches:
        patch.install()


def uninstall() -> None:
    global _users
    _users = max(0, _users - 1)
    if _users:
        return
    for patch in _patches:
        patch.remove()


def _scale(value: Any, factor: float) -> Any:
    if isinstance(value, Tensor):
        return value.mul_(factor)  # capturable optimizers keep their lr tensor
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value * factor
    return value


def scale_lr(optimizer: Optimizer, factor: float) -> None:
    """Multiply every learning rate of ``optimizer`` by ``factor``, schedules included.

    Param groups' ``lr`` (and ``initial_lr``, OneCycleLR's ``max_lr``/``min_lr``) and the
    known schedulers' base rates are scaled, so a closed-form schedule (LambdaLR,
    OneCycleLR, CyclicLR) keeps the new scale at its next step as a chained one does.
    """
    for group in optimizer.param_groups:
        for key in LR_KEYS:
            if key in group:
                group[key] = _scale(group[key], factor)
    t = _trackers.get(optimizer)
    for scheduler in list(t.schedulers) if t is not None else []:
        for attr in SCHEDULER_LR_ATTRS:
            values = getattr(scheduler, attr, None)
            if isinstance(values, list):
                setattr(scheduler, attr, [_scale(v, factor) for v in values])
