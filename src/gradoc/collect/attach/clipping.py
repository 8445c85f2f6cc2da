"""The program's own gradient clipping and loss scaling, as the taps see them: the norm
the program's ``clip_grad_norm_`` / ``clip_grad_value_`` measured before it clipped, and the
steps a ``GradScaler`` skipped."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from torch import Tensor

from ..._util.json_types import JsonObject
from ...locate.origin import user_line

if TYPE_CHECKING:
    from ..context import Internal

SKIPS_TOLD = 10
"""Skipped steps told one by one in the run log's events (all of them are counted)."""


class ProgramClipping:
    def __init__(self, run: Internal) -> None:
        self.run = run
        self.calls = 0
        self.scaler_skips = 0
        self._step: tuple[float, Tensor] | None = None
        """The step's clipping: (threshold, the norm measured before it) on the device."""
        self._said: JsonObject | None = None

    def clipped(self, kind: str, threshold: float, measured: Tensor, norm_type: float) -> None:
        self.calls += 1
        if self._step is None:
            self._step = (threshold, measured.detach().reshape(()))
        said: JsonObject = {"fn": kind, "threshold": threshold}
        if not math.isnan(norm_type):
            said["norm_type"] = norm_type
        if said != self._said:
            self._said = said
            at = user_line()  # where the program clips (once per change: a fix's line)
            self.run.set_meta(clipping={**said, **({"at": at} if at else {})})

    def take(self) -> tuple[float, Tensor] | None:
        """The ended step's clipping (None: it did not clip)."""
        step, self._step = self._step, None
        return step

    def scaler_skipped(self) -> bool:
        """A GradScaler skipped a step; whether to tell it in an event."""
        self.scaler_skips += 1
        return self.scaler_skips <= SKIPS_TOLD

    def meta(self) -> dict[str, int]:
        out = {}
        if self.calls:
            out["clip_calls"] = self.calls
        if self.scaler_skips:
            out["scaler_skipped_steps"] = self.scaler_skips
        return out
