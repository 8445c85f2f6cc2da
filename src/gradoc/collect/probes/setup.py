"""What the program set up, read as evidence: parameters left out of every optimizer, and
modules left in ``eval()`` while an optimizer steps.

Read at the primary optimizer's statistics point of a few early steps (``CHECK_AT``), on
the host only (attributes and ``.grad`` presence, no tensor is read):

- **left out**: a parameter of a watched model that requires a gradient and has one after
  the backward, but that no optimizer holds (``Adam(model.head.parameters())`` for a model
  whose towers should train too): its gradient is computed every step and never applied.
  Said when seen at every check.
- **in eval()**: modules that behave differently in training (BatchNorm, Dropout,
  InstanceNorm that tracks running statistics) whose ``training`` is False at every check
  while the optimizer steps: ``model.eval()`` left on after a validation pass, or set once
  before the loop. BatchNorm then normalises with its running statistics (at
  initialisation a mean of 0 and a variance of 1) instead of the batch's; one whose
  defaults still weigh more than half its statistics (``num_batches_tracked`` 0, or a
  preview after the first batches) learnt next to nothing (``fresh_norms``).

- **idle**: an optimizer none of whose parameters had a gradient at any check (everything it
  holds frozen, the new head included, or out of the loss's reach): its steps move nothing.

``meta['setup']`` holds what was seen (``findings.frozen_parameters`` and
``findings.eval_mode`` read it).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import torch.nn as nn

from ..._util import objects
from ..._util.json_types import JsonObject
from ..attach import qualified, taps
from ..probe import Probe

if TYPE_CHECKING:
    from ..context import Context
    from .grads import WatchedOptimizer

CHECK_AT = (1, 10, 100)
"""Primary steps at which the set-up is read (the first step is skipped: a program may
switch modes or build its optimizer's groups lazily around it)."""

DEFAULTS_WEIGH = 0.5
"""A BatchNorm's running statistics are still mostly their defaults above this weight."""

_MODAL = (nn.modules.batchnorm._BatchNorm, nn.modules.dropout._DropoutNd)
"""Modules whose forward differs between training and evaluation."""

NAMES = 20
"""Names kept of each list."""


class SetupCheck(Probe):
    def __init__(self, run: Context) -> None:
        self.run = run
        self.checks = 0
        self.left_out: dict[str, int] | None = None
        """Name -> elements of the parameters left out at every check so far."""
        self.in_eval: dict[str, tuple[str, bool]] | None = None
        """Name -> (class, a BatchNorm that never learnt its statistics) of the modal modules
        in eval() at every check so far."""
        self.elements = 0
        self.whole: set[str] | None = None
        """The watched models none of whose parameters any optimizer holds while some had a
        gradient (a generator whose optimizer was given the discriminator's), at every check."""
        self.idle: dict[str, int] | None = None
        """Name -> elements of the parameters of the optimizers that held no gradient at any
        check so far (optimizers with a gradient anywhere are left out of it)."""

    def at_statistics(self, target: WatchedOptimizer, primary: bool) -> None:
        if not primary or target.manual or target.steps not in CHECK_AT:
            return
        roots = list(self.run.watched.prefixes.items())
        if not roots:
            return
        optimizers = [*self.run.steps.targets, *taps.live_optimizers()]
        held = taps.param_ids(optimizers)
        left: dict[str, int] = {}
        modes: dict[str, tuple[str, bool]] = {}
        elements = 0
        names: dict[int, str] = {}
        whole: set[str] = set()
        graded = False
        for root, prefix in roots:
            for name, p in objects.named_parameters(root):
                elements += p.numel()
                names[id(p)] = qualified(prefix, name)
                graded = graded or p.grad is not None
                if p.requires_grad and p.grad is not None and id(p) not in held:
                    left[qualified(prefix, name)] = p.numel()
            if not any(id(p) in held for p in objects.parameters(root)) and any(
                n.startswith(prefix) for n in left
            ):
                whole.add(prefix.rstrip(".") or type(root).__name__)
            for name, m in objects.named_modules(root):
                if isinstance(m, _MODAL) and not objects.training(m) and _modal_now(m):
                    key = qualified(prefix, name) or prefix or type(m).__name__
                    modes[key] = (type(m).__name__, _fresh(m))
        self.checks += 1
        self.elements = elements
        if graded:  # no gradient anywhere: read after a zero_grad(), which tells nothing
            self._idle(list(self.run.steps.targets), names)  # this run's, not every one alive
        self.whole = whole if self.whole is None else self.whole & whole
        self.left_out = (
            left if self.left_out is None else {k: v for k, v in self.left_out.items() if k in left}
        )
        self.in_eval = (
            modes if self.in_eval is None else {k: v for k, v in self.in_eval.items() if k in modes}
        )

    def _idle(self, optimizers: list[Any], names: dict[int, str]) -> None:
        """The optimizers' parameters (``names``: id -> qualified name) where none of an
        optimizer's had a gradient at this check, kept where they had none at any check."""
        idle: dict[str, int] = {}
        for o in optimizers:
            params = [p for g in o.param_groups for p in g["params"]]
            if params and all(p.grad is None for p in params):
                idle.update(
                    {names.get(id(p), f"param{i}"): p.numel() for i, p in enumerate(params)}
                )
        self.idle = idle if self.idle is None else {k: v for k, v in self.idle.items() if k in idle}

    def close(self, step: int) -> JsonObject:
        if not self.checks:
            return {}
        setup: JsonObject = {"checks": self.checks, "elements": self.elements}
        if self.left_out:
            names = sorted(self.left_out, key=lambda k: -self.left_out[k])  # type: ignore[index]
            setup["left_out"] = {
                "tensors": len(names),
                "elements": sum(self.left_out.values()),
                "names": names[:NAMES],
            }
            if self.whole:
                setup["left_out"]["models"] = sorted(self.whole)
        if self.idle:
            names = list(self.idle)
            setup["idle"] = {
                "tensors": len(names),
                "elements": sum(self.idle.values()),
                "names": names[:NAMES],
            }
        if self.in_eval:
            kinds = Counter(
                cls + (" (never updated)" if fresh else "") for cls, fresh in self.in_eval.values()
            )
            setup["in_eval"] = {
                "fresh_norms": sum(fresh for _, fresh in self.in_eval.values()),
                "modules": len(self.in_eval),
                "names": list(self.in_eval)[:NAMES],
                "kinds": dict(kinds),
            }
        return {"setup": setup}


def _fresh(m: nn.Module) -> bool:
    """A BatchNorm whose running statistics are still mostly their defaults (a mean of 0 and
    a variance of 1): in eval() it normalises by next to nothing it learnt. With a momentum
    m, n counted batches leave the defaults a weight of (1 - m)^n, so one put in eval() after
    a first preview (one batch: 0.9) is as fresh as one never trained. One that counted
    enough batches (pretrained, or frozen on purpose after training) is not; nor is one
    whose momentum is None (a cumulative average: one batch replaces the defaults)."""
    if not isinstance(m, nn.modules.batchnorm._BatchNorm):
        return False
    tracked = objects.attribute(m, "num_batches_tracked")
    if tracked is None:
        return False
    n, momentum = int(tracked), objects.attribute(m, "momentum")
    if momentum is None:
        return n == 0
    return (1.0 - float(momentum)) ** n > DEFAULTS_WEIGH


def _modal_now(m: nn.Module) -> bool:
    """Eval changes this module's forward: a BatchNorm that tracks running statistics, a
    dropout with a non-zero rate."""
    if isinstance(m, nn.modules.batchnorm._BatchNorm):
        return bool(objects.attribute(m, "track_running_stats"))
    return float(objects.attribute(m, "p", 0.0)) > 0.0
