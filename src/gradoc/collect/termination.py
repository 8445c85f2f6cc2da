"""SIGTERM: the runs close, then the process ends as it would have without gradoc.

A cluster scheduler, Kubernetes or ``timeout`` sends SIGTERM before it kills. Without a
handler, Python dies of it at once: no ``finally``, no ``atexit``, so a watched run would
lose its last steps and never write its report. While a run is open, gradoc's handler sits
where the default action was:

- the program had set no handler (the default action): every open run closes (the last
  statistics, the run log completed with status ``terminated``, the report written), then
  the default action is restored and the signal raised again, so the process ends of it,
  with the exit status it has without gradoc (a shell shows 143). Closing is bounded: the
  default action is back in place before closing starts, so a second SIGTERM ends the
  process at once, and so does gradoc itself after ``CLOSE_S`` seconds (schedulers kill
  soon after);
- the program had set its own handler before the run opened: that handler runs, exactly
  as before, and decides; gradoc only notes that the signal came, and closes when the
  program ends (its status then says ``terminated``);
- the program sets its handler after the run opened (``gradoc run`` opens it before the
  script starts): it replaces gradoc's, which then never runs; nothing changes for the
  program, and the run closes as the program ends (its status: how it exited);
- ignored (``SIG_IGN``) or set outside Python: left alone.

The handler acts only in the process that opened the run: a forked child (a DataLoader
worker) inherits it and gets the handler it would have had. Called by another handler that
chains to the one it replaced, it does nothing: without gradoc that one was the default
action, which Python code cannot call.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from .._util import entry
from .._util.text import one_line
from ..store import EventKind

CLOSE_S = 5.0
"""Seconds the runs may take to close after a SIGTERM before the process ends anyway."""

TERMINATED = "terminated"

received: list[int] = []
"""Signals that came while a run was open (a run's close says ``terminated`` then)."""

_armed: dict[str, Any] = {}
"""While armed: ``pid`` (the process that armed), ``previous`` (the handler replaced)."""

_closing = [0]
"""Runs closing now (the signal came during a close, which its handler interrupted)."""
_pending: list[tuple[int, Callable[[str, int], None]]] = []
"""A SIGTERM that came during a close: it ends the process once the close is done."""


@contextlib.contextmanager
def closing() -> Iterator[None]:
    """A run's close. A SIGTERM that interrupts it lets it finish (its report written),
    then closes what else is open and ends the process, within ``CLOSE_S`` all told."""
    _closing[0] += 1
    try:
        yield
    finally:
        _closing[0] -= 1
        if _pending and not _closing[0]:
            signum, close_all = _pending.pop()
            with contextlib.suppress(BaseException):
                close_all(TERMINATED, -signum)
            end_by(signum)


def arm(close_all: Any) -> None:
    """Put gradoc's SIGTERM handler in place (once; the main thread only), closing the open
    runs with ``close_all(status, exit_code)`` when it acts."""
    if _armed or threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is signal.SIG_IGN or previous is None:
        return  # ignored by the program, or set outside Python: not ours to change
    try:
        installed = entry.signal_handler(signal.SIGTERM, _on_sigterm, _recover)
    except (ValueError, OSError):  # no signals here (an embedded interpreter)
        return
    _armed.update(pid=os.getpid(), previous=previous, close_all=close_all, handler=installed)


def disarm() -> None:
    """Put back the handler gradoc replaced, unless the program has set another since."""
    if not _armed or _armed["pid"] != os.getpid():
        _armed.clear()
        return
    previous, installed = _armed.pop("previous"), _armed.pop("handler")
    _armed.clear()
    received.clear()
    if signal.getsignal(signal.SIGTERM) is installed:
        with contextlib.suppress(ValueError, OSError):
            entry.restore_signal(signal.SIGTERM, previous)


def exited(code: object) -> tuple[str, int]:
    """A run's status and exit code when its program called ``sys.exit(code)`` (python
    prints a code that is not an int and exits with 1)."""
    number = code if isinstance(code, int) else (0 if code is None else 1)
    return ("finished" if number == 0 else "failed"), number


def status(status: str, exit_code: int | None, event: Callable[..., None]) -> str:
    """A closing run's status: ``terminated`` once a SIGTERM came, which the program's own
    handler took (an event says how the program ended then)."""
    if not received or status == TERMINATED:
        return status
    how = f"{status}, exit code {exit_code}" if exit_code is not None else status
    event(EventKind.TERMINATED, f"SIGTERM received; the program's own handler ran ({how})")
    return TERMINATED


def _on_sigterm(signum: int, frame: FrameType | None) -> Any:
    if not _armed:
        return None
    previous = _armed["previous"]
    if _armed["pid"] != os.getpid():  # a forked child: the handler it would have had
        if callable(previous):
            return previous(signum, frame)
        end_by(signum)
    if signal.getsignal(signum) is not _armed["handler"]:
        return None  # called by a handler that replaced gradoc's: without gradoc, a no-op
    received.append(signum)
    if callable(previous):  # the program's own handler decides; gradoc closes at its end
        return previous(signum, frame)
    entry.restore_signal(signum, signal.SIG_DFL)  # a second SIGTERM ends the process at once
    deadline = threading.Timer(CLOSE_S, os.kill, (os.getpid(), signum))
    deadline.daemon = True
    deadline.start()
    if _closing[0]:  # interrupted a run's close: it finishes first (see ``closing``)
        _pending.append((signum, _armed["close_all"]))
        return None
    try:
        _armed["close_all"](TERMINATED, -signum)
    except BaseException as exc:  # the process ends by the signal whatever happened
        with contextlib.suppress(Exception):
            print(f"gradoc: could not close the run on SIGTERM: {one_line(exc)}", file=sys.stderr)
    end_by(signum)
    return None


def _recover(signum: int, frame: FrameType | None) -> Any:
    """gradoc failed in its handler: what the program had without gradoc, its own handler
    or the default action (the process ends by the signal)."""
    previous = _armed.get("previous")
    if callable(previous):
        return previous(signum, frame)
    end_by(signum)
    return None


def end_by(signum: int) -> None:
    """End the process by ``signum`` under its default action, as python would."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    with contextlib.suppress(ValueError, OSError):
        entry.restore_signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    threading.Event().wait(1.0)  # the signal ends the process; should it not have, exit
    os._exit(128 + signum)
