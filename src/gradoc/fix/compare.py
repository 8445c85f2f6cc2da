"""Before/after: which findings went away, the two loss curves, what the fix cost."""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .._util.json_types import JsonObject
from ..analysis import GuardSummary, Report
from ..detect.finding import Finding
from ..detect.training import COVERED
from ..store import open_run
from .patch import Edit
from .remedy import CodeFix, Remedy


@dataclass(frozen=True, slots=True)
class Side:
    """One run of the comparison: how it ended, its loss, what a step cost."""

    dir: str
    status: str
    exit_code: int | None
    steps: int
    duration_s: float | None
    s_per_step: float | None
    """The median step, not the mean: one-off costs (imports, the first replay) left out."""
    final_loss: float | None
    """The median of the last tenth of its losses; NaN when its last loss was not finite
    (a run that ended NaN ended NaN, whatever came before)."""
    first_nonfinite_loss: int | None
    loss: list[float]
    guard: GuardSummary | None
    loss_read: int | None = None
    """The steps whose loss was read, of ``steps`` (a verdict needs half: ``COVERED``)."""

    def to_json(self) -> JsonObject:
        return asdict(self)


@dataclass(slots=True)
class Comparison:
    """Two reports of the same script, before and after a fix (``fix.json``)."""

    disappeared: list[Finding]
    remaining: list[Finding]
    new: list[Finding]
    before: Side
    after: Side
    time_per_step_ratio: float | None
    remedy: Remedy | None = None
    code_fixes: list[CodeFix] = field(default_factory=list)
    edit: Edit | None = None
    """The edit of the user's code the re-run was made with (``patch``)."""
    diff: str | None = None
    verdict: str | None = None
    """"verified", "did not help" or "not judged" (:func:`verdict`), for an edit as for a
    remedy."""
    falls: bool = True
    """The first run's loss is one expected to fall (a supervised objective's): a policy
    gradient's or a GAN's loss says nothing of how well it does, and is not compared."""
    why_not: list[str] = field(default_factory=list)
    tried: list[JsonObject] = field(default_factory=list)
    """The re-runs of the same ``gradoc fix`` before this one: what each tried, where, and
    its verdict."""

    def left(self) -> set[tuple[str, str | None]]:
        """The (kind, layer) of the findings the fix did not cure."""
        return {(f.kind, f.layer) for f in self.remaining + self.new}

    def to_json(self) -> JsonObject:
        def brief(f: Finding) -> JsonObject:
            return {
                "kind": f.kind,
                "layer": f.layer,
                "severity": f.severity,
                "step": f.step,
                "summary": f.summary,
            }

        out: JsonObject = {
            "schema": "gradoc.fix/1",
            "disappeared": [brief(f) for f in self.disappeared],
            "remaining": [brief(f) for f in self.remaining],
            "new": [brief(f) for f in self.new],
            "before": self.before.to_json(),
            "after": self.after.to_json(),
            "time_per_step_ratio": self.time_per_step_ratio,
        }
        if self.remedy is not None:
            out["remedy"] = self.remedy.to_json()
            out["code_fixes"] = [f.to_json() for f in self.code_fixes]
        if self.edit is not None:
            out["patch"] = {**self.edit.to_json(), "diff": self.diff}
        if self.verdict is not None:
            out["verdict"] = self.verdict
            out["why_not"] = list(self.why_not)
        if self.tried:
            out["tried"] = list(self.tried)
        return out


def _side(run_dir: Path, report: Report) -> Side:
    with open_run(run_dir) as log:
        loss, times = log.scalar("loss"), log.scalar("time").values
    finite = [v for v in loss.values if math.isfinite(v)]
    tail = finite[-max(1, len(finite) // 10) :] if finite else []
    if loss.values and not math.isfinite(loss.values[-1]):
        tail = [math.nan]  # it ended non-finite: so is how it ended
    bad = next((s for s, v in zip(loss.steps, loss.values) if not math.isfinite(v)), None)
    deltas = [b - a for a, b in itertools.pairwise(times)]
    return Side(
        dir=str(run_dir),
        status=report.status,
        exit_code=report.run.exit_code,
        steps=report.run.steps,
        duration_s=report.run.duration_s,
        s_per_step=statistics.median(deltas) if deltas else None,
        final_loss=statistics.median(tail) if tail else None,
        first_nonfinite_loss=bad,
        loss=loss.values,
        guard=report.run.guard,
        loss_read=len(loss.values),
    )


def compare(before_dir: Path, before: Report, after_dir: Path, after: Report) -> Comparison:
    """The comparison of two reports of the same script."""
    b = {(f.kind, f.layer): f for f in before.serious}
    a = {(f.kind, f.layer): f for f in after.serious}
    sides = _side(before_dir, before), _side(after_dir, after)
    cost = None
    if sides[0].s_per_step and sides[1].s_per_step:
        cost = sides[1].s_per_step / sides[0].s_per_step
    kinds = [o.training for o in before.run.objectives]
    return Comparison(
        falls=all(k == "supervised" for k in kinds),
        disappeared=[f for k, f in b.items() if k not in a],
        remaining=[f for k, f in a.items() if k in b],
        new=[f for k, f in a.items() if k not in b],
        before=sides[0],
        after=sides[1],
        time_per_step_ratio=cost,
    )


LOSS_NOISE = 0.05
"""How much higher the fixed run's final loss may end than the first run's and still be "at
least as good" (the median of the last tenth of each run's steps)."""


NOT_JUDGED = "not judged"
"""The verdict where either run's loss was read on fewer than half its steps."""


def verdict(result: Comparison, kind: str, objective: bool = False) -> tuple[str, list[str]]:
    """Whether an edit made against a finding of ``kind`` worked, and why not: "not judged"
    when either run's loss was read on fewer than half its steps (``COVERED``); "verified" when
    the finding is gone, no new warning or error came, the loss ended at least as good (within
    :data:`LOSS_NOISE`) and the fixed run exited as the first did or cleanly; else "did not
    help", with each of those that failed, in the run's numbers. An edit that changes what
    the loss computes (``objective``: a log-probability for a probability) has its loss
    checked for a finite value only: the two runs' losses are not the same quantity; nor is
    the loss of an objective not expected to fall (a policy gradient's, a GAN's)."""
    b, a = result.before, result.after
    unread = [
        f"the {which} run's loss was read on {side.loss_read} of its {side.steps} steps"
        for which, side in (("first", b), ("fixed", a))
        if side.loss_read is not None and side.steps and side.loss_read < COVERED * side.steps
    ]
    if unread:  # no verdict from what was not seen
        return NOT_JUDGED, [*unread, "fewer than half: the fix cannot be judged by its loss"]
    why = []
    if any(f.kind == kind for f in result.remaining):
        why.append(f"{kind} is still found")
    why += [f"new: {f.kind} ({f.summary})" for f in result.new]
    if a.final_loss is None:
        why.append("the fixed run logged no finite loss")
    elif not math.isfinite(a.final_loss):
        why.append("the fixed run's loss ended non-finite")
    elif (
        not objective
        and result.falls
        and b.final_loss is not None
        and math.isfinite(b.final_loss)
        and a.final_loss > b.final_loss + LOSS_NOISE * abs(b.final_loss) + 1e-12
    ):
        why.append(f"the loss ended worse: {a.final_loss:.4g} against {b.final_loss:.4g}")
    if a.exit_code not in (0, b.exit_code):
        why.append(f"the fixed run exited {a.exit_code} (the first: {b.exit_code})")
    return ("did not help" if why else "verified"), why
