"""TensorBoard: the run log's series and the findings as event files.

Written with PyTorch's own ``torch.utils.tensorboard.SummaryWriter`` (needs the
``tensorboard`` package): every series of ``step_rows`` at its steps, each finding as
text under ``findings`` at its step.
"""

from __future__ import annotations

from pathlib import Path

from ..analysis import Report
from ..store import open_run
from ._series import step_rows


def export(run_dir: str | Path, logdir: str | Path, report: Report) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(logdir))
    try:
        with open_run(run_dir) as log:
            for step, row in step_rows(log).items():
                for key, value in row.items():
                    writer.add_scalar(key, value, step)
        for f in report.findings:
            writer.add_text("findings", f"**{f.severity}** `{f.kind}`: {f.summary}", f.step or 0)
    finally:
        writer.close()
