"""sinks: the run log's series and findings, also written where teams look (imported lazily).

``gradoc.watch(..., sinks={"tensorboard": "tb-logs/run1"})`` exports at ``close()``, from
the run log (the store stays the seam): ``tensorboard``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SINKS = ("tensorboard",)


def export(kind: str, run_dir: str | Path, target: str | Path, report: dict[str, Any]) -> None:
    if kind == "tensorboard":
        from .tensorboard import export as tb

        tb(run_dir, target, report)
        return
    raise ValueError(f"unknown sink {kind!r}; one of {SINKS}")
