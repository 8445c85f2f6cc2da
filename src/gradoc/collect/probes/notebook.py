"""A watched run in a Jupyter notebook: a live one-line status while it trains.

The status is a probe (``probe``), chosen when the run starts inside a Jupyter kernel and
``WatchConfig.live`` is on. At the end of a step, at most once a second, it rewrites one
display in the cell's output: the step, the newest loss the host already holds (that of
the last transfer, ``Steps.last_loss``: the status never reads the device), the steps a
second and the run directory. Showing a run or a run log as HTML (its report, inline) is
``report/notebook.py``'s.
"""

from __future__ import annotations

import html
import sys
import time
from typing import TYPE_CHECKING, Any

from ..._util.json_types import JsonObject
from ..._util.text import number
from ..probe import Probe

if TYPE_CHECKING:
    from pathlib import Path

    from ..context import Context


def in_notebook() -> bool:
    """The program runs in a Jupyter kernel (an IPython shell with a kernel)."""
    ipython = sys.modules.get("IPython")
    if ipython is None or "ipykernel" not in sys.modules:
        return False
    shell = ipython.get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def status_line(
    directory: Path | None, step: int, loss: tuple[int, float] | None, rate: float | None
) -> str:
    """``gradoc · step 1,200 · loss 0.0312 (step 1,150) · 52 steps/s · runs/quickstart``."""
    parts = ["gradoc", f"step {step:,}"]
    if loss is not None:
        at, value = loss
        parts.append(f"loss {number(value)}" + (f" (step {at:,})" if at != step - 1 else ""))
    if rate is not None:
        parts.append(f"{number(rate)} steps/s")
    if directory is not None:
        parts.append(str(directory))
    return " · ".join(parts)


def status_html(text: str) -> str:
    """One line of status as a notebook's HTML output."""
    return f'<div class="gradoc-status" style="font-family: monospace">{html.escape(text)}</div>'


class LiveStatus(Probe):
    """One line in the cell's output, rewritten while the run trains."""

    EVERY_S = 1.0
    wants_loss = True

    def __init__(self, ctx: Context, directory: Path | None = None) -> None:
        from IPython.display import HTML, display

        self.ctx, self.directory, self._html = ctx, directory, HTML
        self.t0 = self.shown = time.monotonic()
        # the run's steps do not exist yet: the probes are made first
        self.handle: Any = display(HTML(self._render(0, None, None)), display_id=True)

    def _render(
        self, step: int, loss: tuple[int, float] | None, rate: float | None, done: str = ""
    ) -> str:
        return status_html(status_line(self.directory, step, loss, rate) + done)

    def _show(self, step: int, done: str = "") -> None:
        elapsed = time.monotonic() - self.t0
        rate = step / elapsed if step and elapsed > 0 else None
        try:
            page = self._render(step, self.ctx.steps.last_loss, rate, done)
            self.handle.update(self._html(page))
        except Exception:  # a display that failed must not cost the run its log
            self.handle = None

    def end_step(self, step: int, activations_seen: bool) -> None:
        now = time.monotonic()
        if self.handle is not None and now - self.shown >= self.EVERY_S:
            self.shown = now
            self._show(step + 1)

    def close(self, step: int) -> JsonObject:
        if self.handle is not None:
            elapsed = time.monotonic() - self.t0
            self._show(step, f" · done in {number(elapsed)} s: show the run for its report")
        return {}
