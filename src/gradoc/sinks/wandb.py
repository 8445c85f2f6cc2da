"""Weights & Biases, offline: ``sinks={"wandb": "wandb-dir"}``; ``wandb sync`` uploads later.

Every series of ``step_rows`` is logged at its step; the findings go to the run summary
(``gradoc/findings``, ``gradoc/status``).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..analysis import Report
from ..store import open_run
from ._series import finding_lines, step_rows


def export(run_dir: str | Path, target: str | Path, report: Report) -> None:
    os.environ.setdefault("WANDB_SILENT", "true")
    import wandb

    Path(target).mkdir(parents=True, exist_ok=True)
    run = wandb.init(
        mode="offline", dir=str(target), project="gradoc", name=Path(run_dir).name, reinit=True
    )
    try:
        with open_run(run_dir) as log:
            for step, row in step_rows(log).items():
                run.log(row, step=step)
        run.summary["gradoc/status"] = report.status
        run.summary["gradoc/findings"] = finding_lines(report)
    finally:
        run.finish()
