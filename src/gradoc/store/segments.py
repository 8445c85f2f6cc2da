"""A run log continued by a restarted job: one run, in segments.

A long training is preempted, killed or stopped, and restarted from its last checkpoint
into the same run directory (``gradoc run --resume``, ``gradoc.watch(..., resume=True)``).
The log then goes on as a new segment: :func:`previous` reads how the last one stands when
the new writer opens it, and :func:`begin` (a writer record) starts the segment at the step
the program resumed from. Steps the previous segment recorded from there on were trained
again from the checkpoint: their rows give way to the new segment's, so that every series
is the training that produced the final weights, continuous across segments; the segment
records how many were run again.

``meta['segments']``: one entry per segment, oldest first: ``start_step``, ``started_at``
(seconds since the epoch) and, from the second on, ``after``: how the one before ended
(``status``, its ``last_step``, the steps it recorded that were run again: ``redone``).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field

from .._util.json_types import JsonObject
from .._util.text import one_line
from ..errors import UsageError
from .liveness import Writer
from .meta import RunMeta
from .schema import SCHEMA_VERSION

STEP_TABLES = (
    "steps",
    "param_arrays",
    "act_stats",
    "objective_losses",
    "policy_entropy",
    "attention",
    "output_logits",
    "metrics",
)
"""The tables keyed by step: a step run again replaces its rows in each."""


@dataclass(frozen=True, slots=True)
class Previous:
    """How a run log stands when a new segment opens it."""

    status: str
    """How its last segment ended (``killed``: the process is gone, the log never closed)."""
    last_step: int | None
    """Its last recorded step (None: none)."""
    time_s: float
    """Seconds of training it recorded (the new segment's step times go on from there)."""
    started_at: float | None
    segments: list[JsonObject] = field(default_factory=list)
    events: int = 0
    """The highest event id it holds (its events at or after the resume step go)."""

    @property
    def next_step(self) -> int:
        """The step after its last (where a run that keeps no step count goes on)."""
        return 0 if self.last_step is None else self.last_step + 1


def previous(conn: sqlite3.Connection, path: object) -> Previous:
    """The log's state as a new segment opens it; refuses a log of another schema, or one
    whose writer still runs."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version != SCHEMA_VERSION:
        raise UsageError(
            f"{one_line(path)} holds a run log of schema {version} (another gradoc version); "
            f"this gradoc continues only version {SCHEMA_VERSION}: choose another directory"
        )
    meta = RunMeta.of({k: json.loads(v) for k, v in conn.execute("SELECT key, value FROM meta")})
    status = meta.status or "running"
    if status == "running":
        writer = Writer.of(meta.process, meta.heartbeat)
        if writer is not None and not writer.gone:
            where = f"pid {writer.pid}" + (f" on {writer.host}" if writer.alive is None else "")
            raise UsageError(
                f"{one_line(path)} is still being written by {one_line(where)}: a run log "
                "has one writer; resume once that process has ended"
            )
        status = "killed"
    last, time_s = conn.execute("SELECT MAX(step), MAX(time) FROM steps").fetchone()
    time_s = max(float(time_s or 0.0), float(meta.duration_s or 0.0))
    events = conn.execute("SELECT MAX(id) FROM events").fetchone()[0] or 0
    # the first segment did not know it was one
    segments = meta.segments or [{"start_step": 0, "started_at": meta.started_at}]
    return Previous(status, last, time_s, meta.started_at, segments, events)


def segments_after(prev: Previous, start: int, now: float) -> list[JsonObject]:
    """``meta['segments']`` with a new segment starting at step ``start``."""
    redone = max(0, prev.next_step - start)
    after = {"status": prev.status, "last_step": prev.last_step, "redone": redone}
    return [*prev.segments, {"start_step": start, "started_at": now, "after": after}]


def begin(conn: sqlite3.Connection, prev: Previous, start: int) -> None:
    """A writer record: the previous segments' rows from step ``start`` on give way (their
    steps are trained again), and their events there go."""
    for table in STEP_TABLES:
        conn.execute(f"DELETE FROM {table} WHERE step >= ?", (start,))
    conn.execute("DELETE FROM events WHERE id <= ? AND step >= ?", (prev.events, start))
