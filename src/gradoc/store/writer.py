"""Writes the run log off the training thread.

The training thread only puts records on a bounded queue (``put`` blocks when the
writer falls ``queue_size`` records behind: back-pressure instead of unbounded memory),
a few at a time: records are staged and handed over together (every ``STAGE_S`` seconds
or ``flush_every_steps // 2`` records, at most ``STAGE_MAX``), so the writer thread wakes,
and takes the GIL from the training thread, a few times a second rather than every step;
when training pauses, the writer takes what is staged itself.
A daemon thread decodes them, writes them in batches and commits at least every
``flush_every_s`` seconds or ``flush_every_steps`` steps, so a ``kill -9`` loses at most
that much. WAL mode keeps every committed batch through a crash of the process.

Size stays bounded on long runs: per-layer rows of steps older than the most recent
``keep_recent_steps`` are thinned to about ``keep_old_steps`` evenly spaced steps (the
stride is a power of two, so thinning again keeps a subset of what was kept); steps
with an event are never thinned, and the ``steps`` table keeps every step.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import queue
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

from .._util.json_types import JsonObject
from .._util.text import one_line
from ..errors import UsageError
from .liveness import identity
from .schema import DDL, PER_LAYER_TABLES, SCHEMA_VERSION
from .segments import Previous, previous

Write = Callable[[sqlite3.Connection], int | None]
"""A record: writes itself with the connection, returns the step it belongs to (if any)."""


@dataclass(frozen=True, slots=True)
class Stopped:
    """The run log stopped recording before the run ended (a full disk): what the run knew
    in memory then, so that its report says what was not watched."""

    error: str
    """Why the writer stopped, on one line."""
    steps: int
    """The steps the run took (the log holds fewer)."""
    status: str
    exit_code: int | None


def real(x: float | None) -> float | str | None:
    """SQLite turns NaN into NULL; store it as the text 'NaN' so 'NaN' and 'missing' differ."""
    if x is None:
        return None
    return "NaN" if math.isnan(x) else x


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")  # durable through a process crash
    return conn


def create(path: Path) -> sqlite3.Connection:
    """Create a new run log. The file is created exclusively first, so of two writers
    racing for one directory (two ranks given the same ``out``) one gets a clear error
    instead of both writing into one log."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        raise UsageError(
            f"{one_line(path.parent)} already holds a run log (run.db); choose another "
            "directory or remove it"
        ) from None
    except OSError as exc:
        raise UsageError(f"cannot create {one_line(path)}: {exc.strerror or exc}") from None
    conn = connect(path)
    conn.executescript(DDL)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    # the process writing it: a reader of a log that never closed checks whether it is gone
    write_meta(conn, schema_version=SCHEMA_VERSION, process=identity())
    return conn


class _Flush:
    def __init__(self) -> None:
        self.done = threading.Event()


_CLOSE = object()

STAGE_S = 0.1
"""Longest a record waits staged on the training thread before the writer sees it."""
STAGE_MAX = 16
"""Most records handed to the writer thread at once."""
HEARTBEAT_S = 10.0
"""Longest the writer goes without a commit (the heartbeat alone, while training pauses)."""


class RunWriter:
    """Owns the database connection and the writer thread of one run."""

    def __init__(
        self,
        path: Path,
        *,
        flush_every_s: float = 1.0,
        flush_every_steps: int = 50,
        queue_size: int = 256,
        keep_recent_steps: int = 2000,
        keep_old_steps: int = 2000,
        resume: bool = False,
    ) -> None:
        """``resume``: continue the log at ``path`` as a new segment (``previous`` says how
        it stood; see ``segments``), or create it when there is none."""
        self.path = path
        self.flush_every_s = flush_every_s
        self.flush_every_steps = flush_every_steps
        self.keep_recent_steps = keep_recent_steps
        self.keep_old_steps = keep_old_steps
        self.error: BaseException | None = None
        self.previous: Previous | None = None
        if resume and path.exists():
            self._conn = connect(path)
            try:
                self.previous = previous(self._conn, path.parent)
            except BaseException:
                self._conn.close()
                raise
            write_meta(self._conn, process=identity())  # its writer now
        else:
            self._conn = create(path)
        self._stage_max = max(1, min(STAGE_MAX, flush_every_steps // 2, queue_size))
        self._stage_s = min(STAGE_S, flush_every_s / 4)
        self._staged: list[Write] = []
        self._staged_at = time.monotonic()
        self._stage_lock = threading.RLock()  # a SIGTERM's close may come while held
        # bounded in records: queue_size records wait at most, in batches
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(1, queue_size // self._stage_max))
        last = self.previous.last_step if self.previous is not None else None
        self._max_step = -1 if last is None else last
        self._thinned_at = 0
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="gradoc-writer", daemon=True)
        self._thread.start()

    # -- training-thread side -------------------------------------------------------
    def put(self, record: Write, now: bool = False) -> None:
        """Queue a record; blocks while the writer is ``queue_size`` records behind. ``now``:
        hand it over at once (a record that carries many steps, see ``collect.step.record``)."""
        if self._closed:
            return
        # NOTE: handed over under the lock, so that the writer, which takes staged records
        # itself when the queue is empty, never applies them before an earlier batch
        with self._stage_lock:
            self._staged.append(record)
            if now or len(self._staged) >= self._stage_max or self._due():
                self._queue.put(self._take())

    def _due(self) -> bool:
        return time.monotonic() - self._staged_at >= self._stage_s

    def _take(self) -> list[Write]:
        """The staged records (under the stage lock)."""
        batch, self._staged = self._staged, []
        self._staged_at = time.monotonic()
        return batch

    def _hand_over(self) -> None:
        with self._stage_lock:
            if self._staged:
                self._queue.put(self._take())

    def set_meta(self, **items: Any) -> None:
        self.put(lambda conn: write_meta(conn, **items))

    def flush(self, timeout: float | None = 30.0) -> None:
        """Wait until everything queued so far is committed."""
        if self._closed:
            return
        self._hand_over()
        marker = _Flush()
        self._queue.put(marker)
        marker.done.wait(timeout)

    def close(self) -> None:
        """Commit what is queued and stop the writer thread."""
        if self._closed:
            return
        self._hand_over()
        self._closed = True
        self._queue.put(_CLOSE)
        self._thread.join()
        # A finished run is one self-contained file: leave WAL mode, which folds the -wal
        # file into run.db and removes it (readers of a running log need WAL). If another
        # reader holds the log open, WAL stays; the log is complete either way.
        with contextlib.suppress(sqlite3.Error):
            self._conn.execute("PRAGMA journal_mode=DELETE")
        self._conn.close()

    # -- writer thread ----------------------------------------------------------------
    def _loop(self) -> None:
        pending = 0
        last_commit = time.monotonic()
        while True:
            timeout = max(0.0, last_commit + self.flush_every_s - time.monotonic())
            try:
                # staged records are fetched when training pauses (STAGE_S at the latest)
                poll = self._stage_s * 2
                item = self._queue.get(timeout=min(timeout, poll) if pending else poll)
            except queue.Empty:
                item = self._take_idle()
            if isinstance(item, list):
                for record in item:
                    pending += self._apply(record)
            due = pending and (
                pending >= self.flush_every_steps
                or time.monotonic() - last_commit >= self.flush_every_s
            )
            idle = time.monotonic() - last_commit >= HEARTBEAT_S  # alive while training pauses
            if due or idle or item is _CLOSE or isinstance(item, _Flush):
                self._commit()
                pending, last_commit = 0, time.monotonic()
            if isinstance(item, _Flush):
                item.done.set()
            if item is _CLOSE:
                return

    def _take_idle(self) -> list[Write] | None:
        """Staged records that waited ``STAGE_S`` while training paused. NOTE: never waits
        for the stage lock: the training thread may hold it while blocked on a full queue,
        which only this thread drains."""
        if not self._stage_lock.acquire(blocking=False):
            return None
        try:
            return self._take() if self._staged and self._due() else None
        finally:
            self._stage_lock.release()

    def _apply(self, record: Write) -> int:
        if self.error is not None:
            return 0  # keep draining so training never blocks on a broken log
        try:
            if not self._conn.in_transaction:
                self._conn.execute("BEGIN")
            before = self._max_step
            step = record(self._conn)
            if step is None:
                return 1
            self._max_step = max(self._max_step, step)
            return max(1, self._max_step - before)  # the steps it carried, for the commits
        except Exception as exc:
            self._fail(exc)
            return 0

    def _commit(self) -> None:
        """Commit what was applied, with the heartbeat (``store.liveness``)."""
        if self.error is not None:
            return
        try:
            if not self._conn.in_transaction:
                self._conn.execute("BEGIN")
            write_meta(self._conn, heartbeat=round(time.time(), 3))
            self._conn.execute("COMMIT")
            if self._max_step - self._thinned_at >= max(1, self.keep_recent_steps // 4):
                self._thin()
        except Exception as exc:
            self._fail(exc)

    def _thin(self) -> None:
        self._thinned_at = self._max_step
        cutoff = self._max_step - self.keep_recent_steps
        if cutoff <= self.keep_old_steps:
            return
        stride = 1 << math.ceil(math.log2(cutoff / self.keep_old_steps))
        self._conn.execute("BEGIN")
        for table in PER_LAYER_TABLES:
            self._conn.execute(
                f"DELETE FROM {table} WHERE step < ? AND step % ? != 0 "
                "AND step NOT IN (SELECT step FROM events WHERE step IS NOT NULL)",
                (cutoff, stride),
            )
        self._conn.execute("COMMIT")

    def _fail(self, exc: BaseException) -> None:
        self.error = exc
        print(f"gradoc: run log {self.path} stopped recording: {exc}", file=sys.stderr)
        try:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass


def insert_rows(conn: sqlite3.Connection, table: str, rows: Iterable[tuple[Any, ...]]) -> None:
    """Insert (or replace) ``rows``, each a full row of ``table``, in order.

    NOTE: a statement per chunk of rows (up to 64, at most 999 values: any SQLite's limit),
    not one per row. The sqlite3 module lets go of the GIL around each statement's step, and
    the writer thread that takes it back once per row takes it from the training thread as
    often: ``executemany`` of a 50-step record cost a 0.3 ms step 0.02 ms (``benchmarks/
    tiny.py``). Chunk sizes are powers of two, so that few statements are ever prepared."""
    rows = rows if isinstance(rows, list) else list(rows)
    if not rows:
        return
    width = len(rows[0])
    most = 1 << (max(1, min(64, 999 // width)).bit_length() - 1)
    at, n = 0, len(rows)
    while at < n:
        size = min(most, 1 << ((n - at).bit_length() - 1))
        conn.execute(_insert(table, width, size), list(chain.from_iterable(rows[at : at + size])))
        at += size


@functools.cache
def _insert(table: str, width: int, rows: int) -> str:
    """The statement inserting ``rows`` rows of ``width`` values into ``table``."""
    row = "(" + ",".join("?" * width) + ")"
    return f"INSERT OR REPLACE INTO {table} VALUES " + ",".join([row] * rows)


def write_meta(conn: sqlite3.Connection, **items: Any) -> None:
    """Record facts about the run (JSON values) in the ``meta`` table (on the writer)."""
    rows = [(k, json.dumps(v, default=str)) for k, v in items.items()]
    conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", rows)


def append_event(path: Path, step: int | None, kind: str, message: str, data: JsonObject) -> None:
    """Add an event to a closed run log (what ``gradoc run`` learns after the script ended)."""
    conn = sqlite3.connect(path)
    try:
        with conn:
            conn.execute(
                "INSERT INTO events (step, time, kind, message, data) VALUES (?, ?, ?, ?, ?)",
                (step, 0.0, kind, message, json.dumps(data, default=str)),
            )
    finally:
        conn.close()
