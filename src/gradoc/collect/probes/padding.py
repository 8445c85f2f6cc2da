"""The padding probe (``check_padding``): audit the batch of the first steps and of every
200th for padding that leaks into real positions (see ``locate.padding``); each new
finding becomes a ``padding_audit`` event."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn as nn
from torch import Tensor

from ..._util import objects
from ...store import EventKind
from ..probe import Probe
from .lengths import batch_of

if TYPE_CHECKING:
    from ..context import Context
    from .grads import WatchedOptimizer


class PaddingAudit(Probe):
    def __init__(self, run: Context) -> None:
        self.run = run
        self._audited: set[tuple[str, str | None]] = set()

    def after_statistics(self, target: WatchedOptimizer, primary: bool) -> None:
        step = target.steps
        if primary and (step < 3 or step % 200 == 0):
            self._audit(step)

    def _audit(self, step: int) -> None:
        from ...locate.padding import audit_padding, mask_pads

        run = self.run
        if run.watched.last_forward is None:
            return
        root, args, kwargs = run.watched.last_forward
        key, first = batch_of(args, kwargs)
        found = mask_pads(kwargs)
        pads = found[0] if found is not None else None
        if pads is None and isinstance(first, Tensor) and not first.is_floating_point():
            embeddings = (e for e in objects.modules(root) if isinstance(e, nn.Embedding))
            idx = next((e.padding_idx for e in embeddings), None)
            if idx is not None:
                pads = first == idx
        if pads is None or not isinstance(first, Tensor) or not bool(pads.any()):
            return
        if pads.shape != first.shape[:2]:
            return
        run.locator.replaying = True  # our hooks stay out of the audit's forwards
        try:
            with torch.enable_grad():
                findings = audit_padding(
                    root, tuple(args), pad_mask=pads, model_kwargs=kwargs, batch_key=key
                )
        finally:
            run.locator.replaying = False
        for f in findings:
            seen = (f.kind, f.layer)
            if seen not in self._audited and f.kind != "padding_waste":
                self._audited.add(seen)
                run.event(EventKind.PADDING_AUDIT, f.summary, step=step, finding=f.to_json())
