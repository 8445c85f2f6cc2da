"""TensorBoard: scalars, per-layer series and findings as event files.

Written with PyTorch's own ``torch.utils.tensorboard.SummaryWriter`` (needs the
``tensorboard`` package): ``loss``, ``grad_norm``, ``lr`` per step; ``grad_norm/<param>``,
``update_ratio/<param>``, ``output_std/<module>``, ``dead_share...`` at their steps; each
finding as text under ``findings`` at its step.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..store import open_run


def export(run_dir: str | Path, logdir: str | Path, report: dict[str, Any]) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(logdir))
    try:
        with open_run(run_dir) as log:
            for name in ("loss", "grad_norm"):
                s = log.scalar(name)
                for step, v in zip(s.steps, s.values):
                    writer.add_scalar(name, v if math.isfinite(v) else float("nan"), step)
            lr = log.lr()
            for step, v in zip(lr.steps, lr.values):
                writer.add_scalar("lr", v, step)
            for param, stats in log.param_table().items():
                for step, v in zip(stats["grad_norm"].steps, stats["grad_norm"].values):
                    writer.add_scalar(f"grad_norm/{param}", v, step)
                w = dict(zip(stats["weight_norm"].steps, stats["weight_norm"].values))
                for step, u in zip(stats["update_norm"].steps, stats["update_norm"].values):
                    if w.get(step):
                        writer.add_scalar(f"update_ratio/{param}", u / w[step], step)
            for module, stats in log.activation_table().items():
                for step, v in zip(stats["std"].steps, stats["std"].values):
                    writer.add_scalar(f"output_std/{module or '(model)'}", v, step)
        for f in report["findings"]:
            text = f"**{f['severity']}** `{f['kind']}`: {f['summary']}"
            writer.add_text("findings", text, f.get("step") or 0)
    finally:
        writer.close()
