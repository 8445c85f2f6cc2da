"""The run log as ``{step: {metric: value}}``, the shape every sink writes."""

from __future__ import annotations

import math

from ..analysis import Report
from ..detect.signals import update_ratio_series
from ..store import RunLog


def step_rows(log: RunLog) -> dict[int, dict[str, float]]:
    """loss, grad_norm, lr; grad_norm/<param>, update_ratio/<param>, output_std/<module>."""
    rows: dict[int, dict[str, float]] = {}

    def put(step: int, key: str, value: float) -> None:
        rows.setdefault(step, {})[key] = value if math.isfinite(value) else float("nan")

    for name in ("loss", "grad_norm"):
        s = log.scalar(name)
        for step, v in zip(s.steps, s.values):
            put(step, name, v)
    lr = log.lr()
    for step, v in zip(lr.steps, lr.values):
        put(step, "lr", v)
    for param, stats in log.param_table().items():
        for step, v in zip(stats.grad_norm.steps, stats.grad_norm.values):
            put(step, f"grad_norm/{param}", v)
        ratios = update_ratio_series(stats.update_norm, stats.weight_norm)
        for step, r in zip(ratios.steps, ratios.values):
            put(step, f"update_ratio/{param}", r)
    for module, acts in log.activation_table().items():
        for step, v in zip(acts.std.steps, acts.std.values):
            put(step, f"output_std/{module or '(model)'}", v)
    return dict(sorted(rows.items()))


def finding_lines(report: Report) -> list[str]:
    return [f"{f.severity} {f.kind} (step {f.step}): {f.summary}" for f in report.findings]
