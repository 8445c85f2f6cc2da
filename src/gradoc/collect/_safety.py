"""What keeps gradoc's failures out of the user's training."""

from __future__ import annotations

import contextlib
import functools
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from .._text import safe
from ..guard import GuardGaveUp
from ..locate.replay import own_work


def guarded(method: Callable[..., None]) -> Callable[..., None]:
    """A hook that fails stops gradoc, never the user's training (and says so once). The
    hook's object is the run, or has it as ``run``; nothing runs once it is broken or while
    its locator replays a step."""

    @functools.wraps(method)
    def hook(self: Any, *args: Any, **kwargs: Any) -> None:
        run = getattr(self, "run", self)
        if run.broken or run.locator.replaying:
            return
        try:
            with own_work():
                method(self, *args, **kwargs)
        except GuardGaveUp:
            raise  # the guard's decision to stop training, not a failure of gradoc
        except Exception as exc:
            run.broken = True
            message = f"internal error in {method.__name__}: {type(exc).__name__}: {exc}"
            print(f"gradoc: {safe(message)}; monitoring stopped, training goes on", file=sys.stderr)
            with contextlib.suppress(Exception):
                run.event("internal_error", message)

    return hook


@contextlib.contextmanager
def sigint_deferred() -> Iterator[list[bool]]:
    """Hold Ctrl-C back until the block is done; the list says whether one came. Only the
    main thread can take signals; elsewhere this does nothing."""
    came: list[bool] = []
    if threading.current_thread() is not threading.main_thread():
        yield came
        return
    try:
        previous = signal.signal(signal.SIGINT, lambda signum, frame: came.append(True))
    except (ValueError, OSError):  # no signals here (an embedded interpreter)
        yield came
        return
    try:
        yield came
    finally:
        signal.signal(signal.SIGINT, previous)
