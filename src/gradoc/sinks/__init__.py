"""sinks: the run log's series and findings, also written where teams look (imported lazily).

``gradoc.watch(..., sinks={"tensorboard": "tb-logs/run1"})`` exports at ``close()``, from
the run log (the store stays the seam): ``tensorboard`` (event files), ``wandb`` (offline
run), ``mlflow`` (local file store).
"""

from __future__ import annotations

import importlib
from pathlib import Path

from ..analysis import Report

SINKS = ("tensorboard", "wandb", "mlflow")


def export(kind: str, run_dir: str | Path, target: str | Path, report: Report) -> None:
    """Write the finished run to one sink (its library imported only now)."""
    if kind not in SINKS:
        raise ValueError(f"unknown sink {kind!r}; one of {SINKS}")
    module = importlib.import_module(f"{__name__}.{kind}")
    module.export(run_dir, target, report)
