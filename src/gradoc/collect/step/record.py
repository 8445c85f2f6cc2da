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
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from ..._util.json_types import JsonObject
from ...store import EventKind
from ...store.writer import insert_rows, real, write_meta
from ..graph import Seen, attention_row, losses
from ..probes import Calls, Slices, activation_rows, grad_rows


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
    """The step's micro-batch losses on the device (one scalar for the common step)."""
    divisors: list[Tensor | None] | None = None
    """What each micro-batch's loss was divided by before its backward (see ``losses``)."""
    clip: tuple[float, Tensor] | None = None
    """The program's clipping: its threshold and the norm it measured before clipping."""


@dataclass(slots=True)
class Layout:
    """Where one transfer's statistics lie in the packet's host vector."""

    step: int
    """The step in progress at the transfer."""
    rows: list[tuple[StepRow, slice | None, list[slice | None] | None]]
    lrs: dict[tuple[int, int], slice]
    targets: list[Slices]
    acts: list[tuple[int, dict[int, Calls]]]
    """Activation steps: (step, where its outputs' statistics lie)."""
    clips: dict[int, slice]
    """Per row (its index), where its clipping's measured norm lies."""
    unused: list[tuple[Seen, slice | None]]
    """Losses the program read and never backpropagated, with where their value lies (None:
    a value known on the host)."""
    objectives: list[tuple[int, int, slice]]
    """The losses of objectives other than the primary optimizer's: (step, objective id,
    where the value lies) (see ``objectives``)."""
    later: bool = False
    """Its steps' vitals were not read at their statistics points (an accelerator's): they
    are checked when it is read."""
    entropies: list[tuple[int, int, slice]] = field(default_factory=list)
    """Policy entropies read (``policy``): (step, objective id, where the value lies)."""
    attention: list[tuple[int, int, slice]] = field(default_factory=list)
    """Attention calls read (``attention``): (step, site, where its (2, heads) values lie)."""
    outputs: list[tuple[int, int, slice]] = field(default_factory=list)
    """Output logits read (``output_logits``): (step, site, where its 3 values lie)."""

    def newest_loss(self, values: Any) -> tuple[int, float] | None:
        """The newest step of the transfer that has a loss, and that loss as the run log
        records it (``values``: the host vector, a list or an array)."""
        for row, at, divisors_at in reversed(self.rows):
            if at is not None:
                return row.step, losses.combine(values[at], divisors_of(values, divisors_at))[0]
        return None


def divisors_of(values: Any, at: list[slice | None] | None) -> list[float] | None:
    """What each micro-batch's loss was divided by (NaN: not known), from the host vector."""
    return None if at is None else [values[d][0] if d is not None else math.nan for d in at]


class StepRecord:
    """Turns one transfer into rows (``counts``: non-finite values per (step, gradient id);
    ``seen``: the non-finite kinds already recorded, shared by the run's records)."""

    def __init__(
        self,
        host: Tensor,
        layout: Layout,
        counts: dict[tuple[int, int], float],
        seen: set[str],
        t0: float,
    ) -> None:
        self.host, self.layout, self.counts, self.seen, self.t0 = host, layout, counts, seen, t0

    def __call__(self, conn: Any) -> int:
        values = self.host.tolist()
        layout = self.layout
        host = self.host.numpy()
        param_rows, primary = grad_rows(layout.targets, self.counts, host)
        act_rows = [
            row for step, acts in layout.acts for row in activation_rows(step, acts, values, host)
        ]
        step_rows = []
        said: dict[tuple[Any, ...], str] = {}  # learning rates as JSON (they rarely change)
        for k, (r, loss_at, divisors_at) in enumerate(layout.rows):
            loss = self._loss(conn, values, loss_at, divisors_at)
            lrs = [
                values[layout.lrs[(k, i)]][0] if (k, i) in layout.lrs else lr
                for i, lr in enumerate(r.lrs)
            ]
            sumsq, nonfinite = primary.get(r.step, (None, None))
            clip_at = layout.clips.get(k)
            step_rows.append(
                (
                    r.step,
                    r.time,
                    real(loss),
                    r.n_backward,
                    real(math.sqrt(sumsq)) if sumsq is not None else None,
                    nonfinite,
                    said.get(tuple(lrs)) or said.setdefault(tuple(lrs), json.dumps(lrs)),
                    r.samples,
                    real(values[clip_at][0]) if clip_at is not None else None,
                    r.clip[0] if r.clip is not None else None,
                )
            )
            if loss is not None and not math.isfinite(loss):
                self._first(
                    conn, EventKind.NONFINITE_LOSS, r.step, f"loss is {loss} at step {r.step}"
                )
        for seen, at in layout.unused:
            value = values[at][0] if at is not None else float(seen.value)  # type: ignore[arg-type]
            if not math.isfinite(value):
                message = f"loss is {value} at step {seen.step} ({seen.how})" + (
                    "" if seen.backpropagated else ", and never reached backward()"
                )
                data = {
                    "backpropagated": seen.backpropagated,
                    "read_by": seen.how,
                    "value": repr(value).lower(),
                }
                self._first(conn, EventKind.NONFINITE_LOSS, seen.step, message, data)
        objective_rows = []
        for step, k, at in layout.objectives:
            value = values[at][0]
            objective_rows.append((step, k, real(value)))
            if not math.isfinite(value):
                message = f"loss is {value} at step {step} (objective {k})"
                self._first(conn, EventKind.NONFINITE_LOSS, step, message, {"objective": k})
        entropy_rows = [(step, k, real(values[at][0])) for step, k, at in layout.entropies]
        attention_rows = [
            attention_row(step, site, host[at]) for step, site, at in layout.attention
        ]
        output_rows = [
            (step, site, *(real(float(v)) for v in host[at])) for step, site, at in layout.outputs
        ]
        counts = self.counts  # empty on a healthy step: no look at each parameter
        bad_steps = (
            [
                sl.step
                for sl in layout.targets
                if any(counts.get((sl.step, w.id)) for w in sl.present)
            ]
            if counts
            else []
        )
        if bad_steps:
            first = min(bad_steps)
            total = int(sum(c for (step, _), c in self.counts.items() if step == first))
            self._first(
                conn,
                EventKind.NONFINITE_GRAD,
                first,
                f"{total} non-finite gradient values at step {first}",
            )
        insert_rows(conn, "steps", step_rows)
        if objective_rows:
            insert_rows(conn, "objective_losses", objective_rows)
        if entropy_rows:
            insert_rows(conn, "policy_entropy", entropy_rows)
        if attention_rows:
            insert_rows(conn, "attention", attention_rows)
        if output_rows:
            insert_rows(conn, "output_logits", output_rows)
        insert_rows(conn, "param_arrays", param_rows)
        insert_rows(conn, "act_stats", act_rows)
        return max([layout.step, *(sl.step for sl in layout.targets)])

    def _loss(
        self,
        conn: Any,
        values: list[float],
        at: slice | None,
        divisors_at: list[slice | None] | None,
    ) -> float | None:
        """A step's loss from its micro-batches' (``losses.combine``); the first step whose
        division is undone (or not) says so in ``meta``."""
        if at is None:
            return None
        divisors = divisors_of(values, divisors_at)
        loss, undone = losses.combine(values[at], divisors)
        if undone is not None and "division" not in self.seen:
            self.seen.add("division")
            write_meta(
                conn, loss_division={"undone": undone, "by": divisors[0] if divisors else None}
            )
        return loss

    def _first(
        self, conn: Any, kind: str, step: int, message: str, data: JsonObject | None = None
    ) -> None:
        """Record the first occurrence of a kind of non-finite value as an event."""
        if kind in self.seen:
            return
        self.seen.add(kind)
        t = time.monotonic() - self.t0
        extra = json.dumps(data) if data else None
        insert_rows(conn, "events", [(None, step, t, kind, message, extra)])
