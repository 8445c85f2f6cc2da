"""A step's statistics, from the packet's host vector to rows: runs on the writer thread.

A transfer (see ``steps``) adds the pending steps' losses and learning rates and each probe's
device tensors to the packet and keeps a :class:`Layout` of where they lie; when the packet
is read, :class:`StepRecord` turns the host vector into the ``steps`` rows, the probes'
rows (``param_arrays``: ``grads.grad_rows``; ``act_stats``: ``activations.activation_rows``)
and the first ``nonfinite_loss`` / ``nonfinite_grad`` events.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from ..store.writer import insert_rows, real
from .activations import Calls, activation_rows
from .grads import Slices, grad_rows


@dataclass(slots=True)
class StepRow:
    """A step as it ended, before its device values (loss, tensor learning rates) are read."""

    step: int
    time: float
    n_backward: int
    samples: int | None
    """Samples the watched model saw in the step (batch sizes; 1 per unbatched call)."""
    lrs: list[float | Tensor]
    """A learning rate may be a tensor (capturable optimizers): it then travels in the pack."""
    loss: Tensor | None


@dataclass(slots=True)
class Layout:
    """Where one transfer's statistics lie in the packet's host vector."""

    step: int
    """The step in progress at the transfer (its activations are this step's)."""
    rows: list[tuple[StepRow, slice | None]]
    lrs: dict[tuple[int, int], slice]
    targets: list[Slices]
    acts: dict[int, Calls]


class StepRecord:
    """Turns one transfer into rows (``counts``: non-finite values per gradient id;
    ``seen``: the non-finite kinds already recorded, shared by the run's records)."""

    def __init__(
        self, host: Tensor, layout: Layout, counts: dict[int, float], seen: set[str], t0: float
    ) -> None:
        self.host, self.layout, self.counts, self.seen, self.t0 = host, layout, counts, seen, t0

    def __call__(self, conn: Any) -> int:
        values = self.host.tolist()
        layout = self.layout
        host = self.host.numpy()
        param_rows, sumsq, nonfinite, primary_step = grad_rows(layout.targets, self.counts, host)
        act_rows = activation_rows(layout.step, layout.acts, values, host)
        step_rows = []
        for k, (r, loss_at) in enumerate(layout.rows):
            loss = values[loss_at][0] if loss_at is not None else None
            lrs = [
                values[layout.lrs[(k, i)]][0] if (k, i) in layout.lrs else lr
                for i, lr in enumerate(r.lrs)
            ]
            current = r.step == primary_step
            step_rows.append(
                (
                    r.step,
                    r.time,
                    real(loss),
                    r.n_backward,
                    real(math.sqrt(sumsq)) if current else None,
                    nonfinite if current else None,
                    json.dumps(lrs),
                    r.samples,
                )
            )
            if loss is not None and not math.isfinite(loss):
                self._first(conn, "nonfinite_loss", r.step, f"loss is {loss} at step {r.step}")
        counts = self.counts  # empty on a healthy step: no look at each parameter
        bad_steps = (
            [sl.step for sl in layout.targets if any(counts.get(w.id) for w in sl.present)]
            if counts
            else []
        )
        if bad_steps:
            total = int(sum(self.counts.values()))
            self._first(
                conn,
                "nonfinite_grad",
                min(bad_steps),
                f"{total} non-finite gradient values at step {min(bad_steps)}",
            )
        insert_rows(conn, "steps", step_rows)
        insert_rows(conn, "param_arrays", param_rows)
        insert_rows(conn, "act_stats", act_rows)
        return max([layout.step, *(sl.step for sl in layout.targets)])

    def _first(self, conn: Any, kind: str, step: int, message: str) -> None:
        """Record the first occurrence of a kind of non-finite value as an event."""
        if kind in self.seen:
            return
        self.seen.add(kind)
        t = time.monotonic() - self.t0
        insert_rows(conn, "events", [(None, step, t, kind, message, None)])
