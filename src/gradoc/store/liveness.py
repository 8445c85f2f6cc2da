"""Whether the process writing a run log is still alive.

A run log that never closed says ``status: running`` in its ``meta`` for ever: after a
``kill -9``, the OOM killer, a node that died. So the log records which process writes it
(``meta['process']``: its pid, the time it started, its host; the start time tells a
reused pid from the writer) and a heartbeat (``meta['heartbeat']``: the time of the writer's
last commit, about every second while the run goes). A reader on the same host checks the
process; on another host it cannot, and says when the writer was last heard from.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import socket
import sys
import time
from dataclasses import dataclass
from typing import Any

from .._util.json_types import JsonObject
from .meta import RunMeta

SILENT_S = 120.0
"""A writer on another host not heard from for this long is taken as gone: it commits a
heartbeat at least every 10 s while it runs (``writer.HEARTBEAT_S``)."""
START_SLACK_S = 1.0
"""A live process whose start time differs from the recorded one by more than this is
another process that got the pid (start times are read at 1/100 s on Linux)."""


def identity() -> JsonObject:
    """This process, as the run log records it (``meta['process']``)."""
    return {"pid": os.getpid(), "started": started(os.getpid()), "host": socket.gethostname()}


def started(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), or None when this system does
    not say (then only whether the pid exists is checked)."""
    return _status(pid)[1]


def _status(pid: int) -> tuple[bytes | None, float | None]:
    """Process ``pid``'s state (Linux; ``Z``: a zombie, it has exited though its parent has
    not reaped it, so its pid still exists) and start time; None where not known."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, ValueError, IndexError, StopIteration):
            return _linux_stat(pid)
        return None, None
    with contextlib.suppress(Exception):  # macOS, Windows: psutil, where installed
        return None, float(importlib.import_module("psutil").Process(pid).create_time())
    return None, None


def _linux_stat(pid: int) -> tuple[bytes, float]:
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    # the command name (field 2) may hold spaces and parentheses: fields after its last ')'
    fields = stat[stat.rindex(b")") + 2 :].split()
    ticks = int(fields[19])  # field 22: the start, in clock ticks since boot
    with open("/proc/stat", "rb") as f:
        boot = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
    return fields[0], boot + ticks / os.sysconf("SC_CLK_TCK")


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # someone else's process: it exists
    return True


@dataclass(frozen=True, slots=True)
class Writer:
    """The process that writes a run log, and whether it is still alive."""

    pid: int
    host: str
    alive: bool | None
    """True: it runs; False: it is gone (or its pid now belongs to another process); None:
    it runs on another host, which this reader cannot check."""
    heartbeat: float | None
    """When it last committed to the log (seconds since the epoch)."""

    @classmethod
    def of(cls, process: JsonObject | None, heartbeat: float | None) -> Writer | None:
        """The writer a log's ``meta['process']`` names (None: a log from before gradoc
        recorded it)."""
        if not process or not isinstance(process.get("pid"), int):
            return None
        pid, host = int(process["pid"]), str(process.get("host") or "")
        return cls(pid, host, _alive(pid, host, process.get("started")), heartbeat)

    def silent_for(self) -> float | None:
        """Seconds since the last heartbeat."""
        return None if self.heartbeat is None else max(0.0, time.time() - self.heartbeat)

    @property
    def gone(self) -> bool:
        """Gone: checked here, or on another host silent for ``SILENT_S``."""
        if self.alive is None:
            silent = self.silent_for()
            return silent is not None and silent > SILENT_S
        return not self.alive


def _alive(pid: int, host: str, recorded: object) -> bool | None:
    if host and host != socket.gethostname():
        return None
    if not _exists(pid):
        return False
    state, now = _status(pid)
    if state == b"Z":
        return False
    if isinstance(recorded, (int, float)) and now is not None:
        return abs(now - recorded) <= START_SLACK_S
    return True


@dataclass(frozen=True, slots=True)
class Ending:
    """How a run log that never closed stands (``RunLog.ending``)."""

    status: str
    """``killed``: the process is gone; ``running``: it runs, or runs on another host."""
    sentence: str
    """What a report says about it, in one sentence."""


def ending(meta: RunMeta, row: tuple[Any, ...] | None) -> Ending | None:
    """How a log whose ``meta`` says ``running`` stands, given its last ``steps`` row (step,
    time since the start); None for a closed run, or a log that names no writer."""
    writer = Writer.of(meta.process, meta.heartbeat)
    if meta.status != "running" or writer is None:
        return None
    step = f"step {row[0]}" if row else "no step"
    started = meta.started_at
    when = f", recorded at {_clock(started + float(row[1]))}" if row and started else ""
    if writer.alive is False:
        return Ending(
            "killed",
            f"ended without closing at {step}{when} (the process, pid {writer.pid}, is gone: "
            "killed, or out of memory)",
        )
    if writer.gone:  # on another host, silent
        return Ending(
            "killed",
            f"ended without closing at {step}{when} (its process on {writer.host} has not "
            f"written for {writer.silent_for():.0f} s)",
        )
    if writer.alive:
        return Ending("running", f"still running (pid {writer.pid}); its last {step}{when}")
    heard = writer.heartbeat
    return Ending(
        "running",
        f"running on {writer.host} or ended there without closing (not checkable from this "
        f"host); last {step}{when}"
        + (f", last heard from at {_clock(heard)}" if heard is not None else ""),
    )


def _clock(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
