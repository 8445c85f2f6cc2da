"""A step's statistics, from the packet's host vector to rows: runs on the writer thread.

A transfer (see ``steps``) adds the pending steps' losses and learning rates and each probe's
device tensors to the packet and keeps a :class:`Layout` of where they lie; when the packet
is read, :class:`StepRecord` turns the host vector into the ``steps``, ``param_stats`` and
``act_stats`` rows and the first ``nonfinite_loss`` / ``nonfinite_grad`` events.
"""

from __future__ import annotations

import array
import json
import math
import time
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from ..stats import combine
from ..store.writer import insert_rows, real
from .layers import WatchedParam


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
class Slices:
    """Where one optimizer's gradient, weight and update statistics lie in the host vector."""

    step: int
    primary: bool
    present: list[WatchedParam]
    held: dict[int, Tensor]
    counted: dict[int, float] | None
    norms: slice | None
    maxabs: slice | None
    updates: slice | None


Calls = list[tuple[int, slice, slice | None]]
"""One module's activation statistics per forward call: (numel, stats, per-unit activity)."""


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
        param_rows, sumsq, nonfinite, primary_step = self._param_rows(values)
        act_rows = [_act_row(layout.step, lid, calls, values) for lid, calls in layout.acts.items()]
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
        bad_steps = [
            sl.step for sl in layout.targets if any(self.counts.get(w.id) for w in sl.present)
        ]
        if bad_steps:
            total = int(sum(self.counts.values()))
            self._first(
                conn,
                "nonfinite_grad",
                min(bad_steps),
                f"{total} non-finite gradient values at step {min(bad_steps)}",
            )
        insert_rows(conn, "steps", step_rows)
        insert_rows(conn, "param_stats", param_rows)
        insert_rows(conn, "act_stats", act_rows)
        return max([layout.step, *(sl.step for sl in layout.targets)])

    def _param_rows(self, values: list[float]) -> tuple[list[tuple[Any, ...]], float, int, Any]:
        """The parameters' rows; the first optimizer's squared global norm, non-finite count
        and step (the steps table's)."""
        rows = []
        sumsq, nonfinite, primary_step = 0.0, 0, None
        for sl in self.layout.targets:
            n = len(sl.present)
            gv = values[sl.norms] if sl.norms is not None else [None] * n
            mv = values[sl.maxabs] if sl.maxabs is not None else [None] * n
            uv = values[sl.updates] if sl.updates is not None else [None] * 2 * n
            if sl.primary and sl.norms is not None:
                primary_step = sl.step
            for i, w in enumerate(sl.present):
                norm = gv[i]
                # counts were taken only where the norm was non-finite; elsewhere they are 0
                bad = None if norm is None else int(self.counts.get(w.id, 0))
                rows.append(
                    (sl.step, w.id, real(norm), real(mv[i]), bad, real(uv[i]), real(uv[n + i]))
                )
                if sl.primary and norm is not None:
                    sumsq += norm * norm
                    nonfinite += bad or 0
        return rows, sumsq, nonfinite, primary_step

    def _first(self, conn: Any, kind: str, step: int, message: str) -> None:
        """Record the first occurrence of a kind of non-finite value as an event."""
        if kind in self.seen:
            return
        self.seen.add(kind)
        t = time.monotonic() - self.t0
        insert_rows(conn, "events", [(None, step, t, kind, message, None)])


def _act_row(step: int, lid: int, calls: Calls, values: list[float]) -> tuple[Any, ...]:
    s = combine(
        [(n, values[v]) for n, v, _ in calls],
        [values[a] if a is not None else None for _, _, a in calls],
    )
    blob = array.array("f", s.unit_active).tobytes() if s.unit_active is not None else None
    return (
        step,
        lid,
        len(calls),
        s.numel,
        real(s.mean),
        real(s.std),
        real(s.zero_frac),
        real(s.sat_frac),
        s.nonfinite,
        s.positions,
        blob,
    )
