"""A resumed run: the step its new segment starts at (see ``store.segments``); and the
``meta`` every run opens with.

The program says where it resumed: an optimizer that keeps a step count in its state
(Adam, AdamW, RMSprop, ...) loaded from the checkpoint has taken that many steps, and the
segment starts there; otherwise it starts after the last step the log recorded. The count
is read when the optimizer is attached, and again at its first statistics point, since a
program may load its checkpoint after ``gradoc.watch()``: the segment begins there, before
the step writes a row.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from .._util.json_types import JsonObject
from .._version import __version__
from ..config import WatchConfig
from ..store import EventKind
from ..store.segments import Previous, begin, segments_after

if TYPE_CHECKING:
    from .context import Internal


def state_step(optimizer: Any) -> int | None:
    """The steps an optimizer's state says it has taken (None: it keeps no count)."""
    state = getattr(optimizer, "state", None)
    if not isinstance(state, Mapping):
        return None
    for s in state.values():
        step = s.get("step") if isinstance(s, dict) else None
        if isinstance(step, Tensor) and step.numel() == 1:
            return int(step.detach().cpu().item())  # once a segment: not a step's read
        if isinstance(step, (int, float)):
            return int(step)
    return None


def opening_meta(
    config: WatchConfig, script: str | None, lr_scale: float, prev: Previous | None
) -> JsonObject:
    """What a run's ``meta`` says when it opens. A resumed run keeps its start, and forgets
    how its last segment closed until this one does."""
    now = time.time()
    opened: JsonObject = {
        "gradoc": __version__,
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "script": script or (sys.argv[0] if sys.argv and sys.argv[0] else None),
        "argv": list(sys.argv),
        "status": "running",
        "config": config.describe(),
        "lr_scale": lr_scale,
    }
    if prev is None:
        return opened | {"started_at": now}
    return opened | {
        "ended_at": None,
        "duration_s": None,
        "exit_code": None,
        "steps": None,
        "segments": segments_after(prev, prev.next_step, now),  # until the program says
    }


class Resumption:
    """The segment a resumed run opens, until its first step fixes where it starts."""

    def __init__(self, run: Internal, prev: Previous) -> None:
        self.run, self.prev = run, prev

    def start(self, optimizer: Any) -> int:
        """Where an optimizer's steps go on from: its state's count, else after the log's."""
        step = state_step(optimizer)
        return self.prev.next_step if step is None else step

    def begin(self, start: int) -> None:
        """The segment starts at step ``start``: said in the log before the step's rows."""
        prev, run = self.prev, self.run
        run.put(lambda conn: begin(conn, prev, start))
        run.set_meta(segments=segments_after(prev, start, time.time()))
        redone = (
            ""
            if prev.last_step is None or prev.last_step < start
            else (f"; steps {start}-{prev.last_step} are trained again")
        )
        message = f"resumed at step {start} (the run before: {prev.status}{redone})"
        run.event(EventKind.RESUMED, message, step=start)
