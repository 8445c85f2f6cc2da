"""``gradoc diff RUN_A RUN_B``: where two runs of (almost) the same model part ways.

The runs are aligned by step. For every statistic both recorded — each parameter's
gradient norm, each module output's std — the per-step ratio B/A is taken in log10.
Run-to-run noise (other batches) moves these ratios a little; a change to the model moves
some a lot. A statistic *differs* at a step when its |log10 ratio| exceeds ``max(1, 3 x
median)`` (at least 10x, and three times that step's median over all statistics). At the
first step where any differs, the change is where it shows first: the earliest module in
network order whose output differs (a change propagates forward), else the last parameter
whose gradient differs (it propagates backward from the loss). The loss curves are
compared alongside, and layers present in one run only are listed (a module added or
removed).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

from .._util.json_types import JsonObject
from ..detect.signals import fmt
from ..store import RunLog, open_run

MIN_LOG_RATIO = 1.0
"""At least 10x."""
NOISE_FACTOR = 3.0
"""... and three times the step's median |log10 ratio| over all statistics."""


def _series(log: RunLog) -> dict[tuple[str, str], dict[int, float]]:
    out: dict[tuple[str, str], dict[int, float]] = {}
    for name, stats in log.param_table().items():
        s = stats.grad_norm
        out[("gradient norm", name)] = dict(zip(s.steps, s.values))
    for name, acts in log.activation_table().items():
        s = acts.std
        out[("output std", name)] = dict(zip(s.steps, s.values))
    return out


def _order(log: RunLog) -> dict[str, int]:
    return {layer.name: i for i, layer in enumerate(log.layers)}


@dataclass(frozen=True, slots=True)
class Difference:
    """One layer statistic that differs between the runs beyond their noise: B / A."""

    layer: str
    statistic: str
    """``output std`` (forward) or ``gradient norm`` (backward)."""
    ratio: float

    def to_json(self) -> JsonObject:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Parting:
    """Where the runs part: the first step and layer that differ, and the others then."""

    step: int
    layer: str
    statistic: str
    log10_ratio: float
    others_at_step: list[Difference]

    @property
    def ratio(self) -> float:
        return float(10**self.log10_ratio)

    def to_json(self) -> JsonObject:
        return {
            "step": self.step,
            "layer": self.layer,
            "statistic": self.statistic,
            "log10_ratio": self.log10_ratio,
            "ratio": self.ratio,
            "others_at_step": [d.to_json() for d in self.others_at_step],
        }


@dataclass(frozen=True, slots=True)
class RunDiff:
    """Two runs of a model compared layer by layer (``gradoc diff``, ``gradoc.diff/1``)."""

    run_a: str
    run_b: str
    steps_compared: int
    parted: Parting | None
    explanation: str
    only_in_a: list[str]
    only_in_b: list[str]
    loss_rel_diff_median: float | None
    first_nonfinite_loss_b: int | None
    loss_steps: list[int]
    loss_a: list[float]
    loss_b: list[float]

    def to_json(self) -> JsonObject:
        return {
            "schema": "gradoc.diff/1",
            "run_a": self.run_a,
            "run_b": self.run_b,
            "steps_compared": self.steps_compared,
            "parted": self.parted.to_json() if self.parted is not None else None,
            "explanation": self.explanation,
            "only_in_a": self.only_in_a,
            "only_in_b": self.only_in_b,
            "loss_rel_diff_median": self.loss_rel_diff_median,
            "first_nonfinite_loss_b": self.first_nonfinite_loss_b,
            "loss": {"a": self.loss_a, "b": self.loss_b, "steps": self.loss_steps},
        }


def diff_runs(run_a: str | Path, run_b: str | Path) -> RunDiff:
    """The comparison (``gradoc diff`` prints and writes it)."""
    with open_run(run_a) as a, open_run(run_b) as b:
        sa, sb = _series(a), _series(b)
        order = _order(b) | {k: v for k, v in _order(a).items() if k not in _order(b)}
        la, lb = a.scalar("loss"), b.scalar("loss")
        names_a = {layer.name for layer in a.layers}
        names_b = {layer.name for layer in b.layers}
    common = sorted(set(sa) & set(sb), key=lambda k: (order.get(k[1], 1 << 30), k[0]))
    by_step: dict[int, list[tuple[tuple[str, str], float]]] = {}
    for key in common:
        for step, va in sa[key].items():
            vb = sb[key].get(step)
            if (
                vb is None
                or not (va > 0 and vb > 0)
                or not (math.isfinite(va) and math.isfinite(vb))
            ):
                continue
            by_step.setdefault(step, []).append((key, math.log10(vb / va)))
    parted: Parting | None = None
    for step in sorted(by_step):
        ratios = by_step[step]
        noise = statistics.median(abs(r) for _, r in ratios)
        limit = max(MIN_LOG_RATIO, NOISE_FACTOR * noise)
        hits = [(k, r) for k, r in ratios if abs(r) > limit]
        # a change shows first downstream in the forward pass (the earliest module whose
        # outputs differ), and first upstream in the backward pass (the last gradient)
        forward = [h for h in hits if h[0][0] == "output std"]
        backward = [h for h in hits if h[0][0] == "gradient norm"]
        pick = forward[0] if forward else (backward[-1] if backward else None)
        if pick is not None:
            (stat, layer), r = pick
            others = [Difference(k[1], k[0], 10**x) for k, x in hits if k != (stat, layer)]
            parted = Parting(step, layer, stat, r, others[:5])
            break
    loss_a = dict(zip(la.steps, la.values))
    loss_b = dict(zip(lb.steps, lb.values))
    shared = sorted(set(loss_a) & set(loss_b))
    loss_diff = [
        (s, abs(loss_b[s] - loss_a[s]) / (abs(loss_a[s]) or 1.0))
        for s in shared
        if math.isfinite(loss_a[s]) and math.isfinite(loss_b[s])
    ]
    nonfinite_b = next((s for s in shared if not math.isfinite(loss_b[s])), None)
    only_a, only_b = sorted(names_a - names_b), sorted(names_b - names_a)
    return RunDiff(
        run_a=str(run_a),
        run_b=str(run_b),
        steps_compared=len(by_step),
        parted=parted,
        explanation=_explain(parted, only_a, only_b, nonfinite_b),
        only_in_a=only_a,
        only_in_b=only_b,
        loss_rel_diff_median=statistics.median(d for _, d in loss_diff) if loss_diff else None,
        first_nonfinite_loss_b=nonfinite_b,
        loss_steps=shared,
        loss_a=[loss_a[s] for s in shared],
        loss_b=[loss_b[s] for s in shared],
    )


def _explain(
    parted: Parting | None, only_a: list[str], only_b: list[str], nan_b: int | None
) -> str:
    parts = []
    if parted is not None:
        r = parted.ratio
        how = f"{fmt(r)} times larger" if r > 1 else f"{fmt(1 / r)} times smaller"
        parts.append(
            f"after the change, {parted.layer}'s {parted.statistic} is {how} "
            f"from step {parted.step}"
        )
    else:
        parts.append("no layer differs beyond run-to-run noise")
    if only_b:
        parts.append(f"only in B: {', '.join(only_b[:4])}")
    if only_a:
        parts.append(f"only in A: {', '.join(only_a[:4])}")
    if nan_b is not None:
        parts.append(f"B's loss turns non-finite at step {nan_b}")
    return "; ".join(parts)
