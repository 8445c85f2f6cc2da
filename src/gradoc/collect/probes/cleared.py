"""Whether the program clears its gradients between optimizer steps, seen on one
parameter's ``.grad`` object: no device read, two attribute reads a step.

``optimizer.zero_grad()`` sets each ``.grad`` to None (a new tensor at the next backward)
or zeroes it in place (its version counter moves once more than the backward calls do).
A loop without it keeps the same tensor, and each ``backward()`` adds to it in place: the
version moves by exactly the number of backward calls since the last step, so the
gradient the optimizer applies is the running sum of every step's. Anything else done to
the tensor in place between the steps (clipping after the step's read, unscaling, a hand
zeroing) moves the version further and reads as cleared: a gradient kept is said only
when nothing touched it but backward.

The saved state is the parameter's ``.grad`` after the optimizer stepped (after any
clipping of that step), held through a weak reference so that a freed gradient is never
mistaken for a new one at the same address. Hand-written updates (no optimizer) are not
checked: their step ends at the next backward, after any clearing.
"""

from __future__ import annotations

import weakref

from torch import Tensor

from ..._util.json_types import JsonObject
from ...locate.origin import user_line_holding
from .grads import WatchedOptimizer


class Clearing:
    def __init__(self) -> None:
        self._saved: tuple[int, weakref.ref[Tensor], int] | None = None
        self.kept = 0
        self.checked = 0
        self.first_kept: int | None = None
        self.at: JsonObject | None = None
        """Where the first kept step's optimizer was stepped (:func:`_stepped_at`)."""
        self._find_step = False

    @staticmethod
    def _sentinel(target: WatchedOptimizer) -> tuple[int, Tensor] | None:
        for p in target.params:
            if p.param.grad is not None:
                return id(p.param), p.param.grad
        return None

    def at_statistics(self, target: WatchedOptimizer, backwards: int, step: int) -> None:
        """The step's gradients are ready: were they added to the last step's?"""
        saved, self._saved = self._saved, None
        found = self._sentinel(target) if not target.manual and backwards else None
        if saved is None or found is None or saved[0] != found[0]:
            return
        self.checked += 1
        if saved[1]() is found[1] and found[1]._version - saved[2] == backwards:
            self.kept += 1
            if self.first_kept is None:
                self.first_kept = step
                self._find_step = True  # read at the step's end: here may be a clip's call

    def after_step(self, target: WatchedOptimizer) -> None:
        if self._find_step:
            self._find_step = False
            self.at = _stepped_at(target)
        found = None if target.manual else self._sentinel(target)
        if found is not None:
            self._saved = (found[0], weakref.ref(found[1]), found[1]._version)

    def summary(self) -> JsonObject:
        if not self.checked:
            return {}
        kept: JsonObject = {
            "kept": self.kept,
            "checked": self.checked,
            "first_kept": self.first_kept,
        }
        if self.at is not None:
            kept["at"] = self.at
        return {"grads_kept": kept}


def _stepped_at(target: WatchedOptimizer) -> JsonObject | None:
    """Where the program steps the optimizer whose gradients it keeps: the file, line and
    code of its ``step()`` call (read at the step's end: its statistics point may be a clip's
    call before it), and the variable holding the optimizer there (where ``gradoc fix``
    inserts its ``zero_grad()``); read once, from the caller's frame."""
    return user_line_holding("optimizer", lambda v: v is target.optimizer)
