"""What keeps gradoc's failures out of the user's training."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .._util import entry
from .._util.json_types import JsonObject
from .._util.text import one_line
from ..locate.replay import own_depth
from ..store import EventKind
from . import termination


def guarded(method: Callable[..., None]) -> Callable[..., None]:
    """A method of the run's that PyTorch or the program calls (through a hook, a tap): one
    that fails stops gradoc, never the user's training (``_util.entry``: said once, recorded
    with its traceback). The method's object is the run, or has it as ``run``; nothing runs
    once it is broken or while its locator replays a step. Its ops are gradoc's own
    (``locate.replay.own_work``).

    NOTE: it runs several times a step, so it is written out: no context manager objects
    (~1 us each)."""
    where = entry.name_of(method)
    cell = entry.fault_cell(where)

    @functools.wraps(method)
    def hook(self: Any, *args: Any, **kwargs: Any) -> None:
        run = getattr(self, "run", self)
        if run.broken or run.locator.replaying:
            return
        own_depth[0] += 1
        try:
            if cell[0] is not None:
                entry.fault(cell, "before", where)
            method(self, *args, **kwargs)
            if cell[0] is not None:
                entry.fault(cell, "after", where)
        except entry.Deliberate:
            raise  # the guard's decision to stop training, not a failure of gradoc
        except Exception as exc:
            run.broken = True
            entry.failed(exc, where)
        finally:
            own_depth[0] -= 1

    setattr(hook, entry.GUARDED, True)
    return hook


def without_grad(method: Callable[..., None]) -> Callable[..., None]:
    """``torch.no_grad()`` around a hook that runs every step, without its context object:
    statistics need no autograd graph."""

    @functools.wraps(method)
    def hook(*args: Any, **kwargs: Any) -> None:
        enabled = torch.is_grad_enabled()
        torch._C._set_grad_enabled(False)
        try:
            method(*args, **kwargs)
        finally:
            torch._C._set_grad_enabled(enabled)

    return hook


@contextlib.contextmanager
def sigint_deferred(run_dir: Any) -> Iterator[None]:
    """Hold Ctrl-C back until the block (closing the run log of ``run_dir``) is done; then,
    if one came, say so and raise KeyboardInterrupt. Only the main thread can take
    signals; elsewhere this only runs the block."""
    with _deferred() as came:
        yield
    if came:
        print(
            f"gradoc: interrupted; the run log is complete ({one_line(run_dir)}), the "
            "report was not written: gradoc report DIR writes it",
            file=sys.stderr,
        )
        raise KeyboardInterrupt


@contextlib.contextmanager
def _deferred() -> Iterator[list[bool]]:
    came: list[bool] = []
    if threading.current_thread() is not threading.main_thread():
        yield came
        return
    previous = signal.getsignal(signal.SIGINT)
    try:
        entry.signal_handler(signal.SIGINT, lambda signum, frame: came.append(True), _noop)
    except (ValueError, OSError):  # no signals here (an embedded interpreter)
        yield came
        return
    try:
        yield came
    finally:
        entry.restore_signal(signal.SIGINT, previous)


def _noop(signum: int, frame: Any) -> None:
    """Nothing to recover: the close goes on, the Ctrl-C is lost."""


def finish_safely(run: Any, write: Callable[[], JsonObject]) -> JsonObject | None:
    """``write()`` the closed run's report and sinks; a failure is said, never raised (the
    user's program goes on and keeps its exit code), except Ctrl-C."""
    try:
        return write()
    except KeyboardInterrupt:
        print(
            f"gradoc: interrupted while writing the report; the run log is complete: "
            f"gradoc report {one_line(run.dir)}",
            file=sys.stderr,
        )
        raise
    except Exception as exc:
        if os.environ.get("GRADOC_DEBUG"):
            raise
        print(
            f"gradoc: could not write the report ({type(exc).__name__}: {one_line(exc)}); "
            f"the run log is at {one_line(run.dir)}",
            file=sys.stderr,
        )
        return None


open_runs: set[Any] = set()
"""Runs not closed yet: the program's exit closes them."""


def remember(run: Any) -> None:
    """An open run: the program's exit closes it, and so does a SIGTERM (``termination``).
    Its entries run, whatever failed before it (``_util.entry``)."""
    entry.reset()
    open_runs.add(run)
    termination.arm(close_terminated)


def _record_failure(message: str, trace: str) -> None:
    """gradoc failed (``_util.entry``): every open run stops watching and records why."""
    for run in list(open_runs):
        run.broken = True
        run.event(EventKind.INTERNAL_ERROR, message, traceback=trace[-4000:])


entry.on_failure(_record_failure)


def others_open(run: Any) -> bool:
    """Another run than ``run`` is open in this process."""
    return any(r is not run for r in open_runs)


def forget(run: Any) -> None:
    """A closed run; the last one closed puts the program's SIGTERM handler back."""
    open_runs.discard(run)
    if not open_runs:
        termination.disarm()


@entry.at_exit
def _close_open_runs() -> None:
    """A script that never closed its run still leaves a complete log and report, which
    says how it ended: an exception nothing caught (python printed it and keeps it in
    ``sys.last_value``) is a crash, or Ctrl-C (an interrupted run)."""
    # an interactive session keeps its last error, long past: not how it ended
    interactive = hasattr(sys, "ps1") or "IPython" in sys.modules
    ended = None if interactive else getattr(sys, "last_value", None)
    status = "exited"
    if isinstance(ended, KeyboardInterrupt):
        status = "interrupted"
    elif isinstance(ended, Exception):
        status = "crashed"
    for run in list(open_runs):
        if status != "exited":
            run.event(
                EventKind.CRASH if status == "crashed" else EventKind.INTERRUPTED,
                f"{type(ended).__name__}: {one_line(ended)[:300]}",
            )
        run.close(status=status)


def close_terminated(status: str, exit_code: int) -> None:
    """SIGTERM with no handler of the program's (see ``termination``): every open run
    closes, its report written, and says where it is before the process ends."""
    for run in list(open_runs):
        run.event(EventKind.TERMINATED, "SIGTERM: the run closed, then the process ended")
        run.close(status=status, exit_code=exit_code)
        print(
            f"gradoc: terminated (SIGTERM) at step {run.step}; the run log and report are "
            f"complete: {one_line(run.dir)}",
            file=sys.stderr,
        )
