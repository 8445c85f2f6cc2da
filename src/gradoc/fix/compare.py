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
from ..detect.measures import measures, trend
from ..detect.training import COVERED
from ..store import RunLog, open_run
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
    measures: dict[str, list[str | float]] = field(default_factory=dict)
    """The program's own measures with a direction (``detect.measures``): name -> [``up``
    or ``down``, its end (the median of its last values)]."""

    def to_json(self) -> JsonObject:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Tried:
    """One re-run of a ``gradoc fix``: what it tried, where it ran, its verdict (None: the
    re-run did not end in one)."""

    fix: str
    dir: str
    verdict: str | None

    def to_json(self) -> JsonObject:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Check:
    """One check a verdict made (:func:`verdict`): its name, whether it held, and what it saw,
    in the runs' numbers."""

    check: str
    held: bool
    saw: str

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
    tried: list[Tried] = field(default_factory=list)
    """The re-runs of the same ``gradoc fix`` before this one: what each tried, where, and
    its verdict."""
    checks: list[Check] = field(default_factory=list)
    """What :func:`verdict` checked: each check's name, whether it held, and in the runs'
    numbers what it saw (``fix.json``'s ``checks``)."""
    together: str | None = None
    """Two fixes made in the one re-run, each of which alone did not verify: said so."""

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
            out["tried"] = [t.to_json() for t in self.tried]
        if self.checks:
            out["checks"] = [c.to_json() for c in self.checks]
        if self.together is not None:
            out["together"] = self.together
        return out


def _measures(log: RunLog) -> dict[str, list[str | float]]:
    """The program's own measures with a direction, and where each ended."""
    logged = {name: (source, log.metric(name)) for name, source in log.metrics().items()}
    found: dict[str, list[str | float]] = {}
    for m in measures(logged, log.meta.declared):
        t = trend(m)
        if t is not None and m.direction is not None and math.isfinite(t.end):
            found[m.name] = [m.direction, t.end]
    return found


def _side(run_dir: Path, report: Report) -> Side:
    with open_run(run_dir) as log:
        loss, times = log.scalar("loss"), log.scalar("time").values
        said = _measures(log)
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
        measures=said,
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
    :data:`LOSS_NOISE`), each of the program's own measures that both runs logged ended no
    worse (within :data:`MEASURE_NOISE`), a first run's NaN is not replaced by a loss that
    stopped moving where it was (:func:`_past_the_nan`), and the fixed run exited as the first
    did or cleanly; else "did not help", with each of those that failed, in the run's numbers.
    Each check made is kept in ``result.checks`` (``fix.json``). An edit that changes what
    the loss computes (``objective``: a log-probability for a probability) has its loss
    checked for a finite value only: the two runs' losses are not the same quantity; nor is
    the loss of an objective not expected to fall (a policy gradient's, a GAN's)."""
    b, a = result.before, result.after
    checks = result.checks
    checks.clear()

    def check(name: str, failed: str | None, saw: str) -> None:
        checks.append(Check(name, failed is None, failed or saw))

    unread = [
        f"the {which} run's loss was read on {side.loss_read} of its {side.steps} steps"
        for which, side in (("first", b), ("fixed", a))
        if side.loss_read is not None and side.steps and side.loss_read < COVERED * side.steps
    ]
    check("both losses read on half their steps or more", "; ".join(unread) or None, "yes")
    if unread:  # no verdict from what was not seen
        return NOT_JUDGED, [*unread, "fewer than half: the fix cannot be judged by its loss"]
    why = []
    if any(f.kind == kind for f in result.remaining):
        why.append(f"{kind} is still found")
    check("the finding is gone", why[0] if why else None, f"no {kind} in the fixed run")
    new = [f"new: {f.kind} ({f.summary})" for f in result.new]
    why += new
    check("nothing new", "; ".join(new) or None, "no new warning or error")
    ended = _loss_ended(result, objective)
    if ended is not None:
        why.append(ended)
    check("the loss ended finite and at least as good", ended, _final(a))
    worse = _measures_worse(b, a, objective)
    why += worse
    if set(b.measures) & set(a.measures):
        check("the program's own measures no worse", "; ".join(worse) or None, _ends(a))
    past = _past_the_nan(b, a) if not objective and result.falls else None
    if b.first_nonfinite_loss is not None and not objective and result.falls:
        check("the loss goes on falling past the first run's NaN", past, "yes")
        if past is not None:
            why.append(past)
    exited = (
        f"the fixed run exited {a.exit_code} (the first: {b.exit_code})"
        if a.exit_code not in (0, b.exit_code)
        else None
    )
    if exited:
        why.append(exited)
    check("it exited as the first run did, or cleanly", exited, f"exit {a.exit_code}")
    return ("did not help" if why else "verified"), why


def _final(side: Side) -> str:
    return "no finite loss" if side.final_loss is None else f"{side.final_loss:.4g}"


def _loss_ended(result: Comparison, objective: bool) -> str | None:
    """Why the fixed run's loss did not end finite and at least as good, else None."""
    b, a = result.before, result.after
    if a.final_loss is None:
        return "the fixed run logged no finite loss"
    if not math.isfinite(a.final_loss):
        return "the fixed run's loss ended non-finite"
    if (
        not objective
        and result.falls
        and b.final_loss is not None
        and math.isfinite(b.final_loss)
        and a.final_loss > b.final_loss + LOSS_NOISE * abs(b.final_loss) + 1e-12
    ):
        return f"the loss ended worse: {a.final_loss:.4g} against {b.final_loss:.4g}"
    return None


MEASURE_NOISE = 0.05
"""How much worse a measure of the program's may end in the fixed run (a share of the first
run's end, at least 1e-12) and still be "no worse"."""


def _ends(side: Side) -> str:
    return ", ".join(f"{name} {float(said[1]):.4g}" for name, said in side.measures.items())


def _measures_worse(b: Side, a: Side, objective: bool = False) -> list[str]:
    """The program's own measures both runs logged that ended worse in the fixed run; after an
    edit that changes what the loss computes (``objective``), not the losses it logs (a
    Trainer's ``loss``, an ``eval_loss``: the same different quantities)."""
    worse = []
    for name, (way, end) in a.measures.items():
        if name not in b.measures or (objective and "loss" in name.lower()):
            continue
        first = float(b.measures[name][1])
        sign = 1.0 if way == "up" else -1.0
        if sign * (float(end) - first) < -(MEASURE_NOISE * abs(first) + 1e-12):
            worse.append(f"the program's {name} ended worse: {float(end):.4g} against {first:.4g}")
    return worse


PAST_SHARE = 0.2
"""The share of the run that must lie past the first run's NaN for its loss to be judged
there."""


def _past_the_nan(b: Side, a: Side) -> str | None:
    """Why the fixed run's loss did not go on past the step where the first run's turned
    non-finite: it stood still from there (a clamp that froze what it guarded), or ended
    higher than it was there (beyond :data:`LOSS_NOISE`; the medians of the tenth of the run
    after that step and of its last tenth); else None, and None where too little of the run
    lies past it to say."""
    at = b.first_nonfinite_loss
    n = len(a.loss)
    if at is None or n < 20 or n - at < PAST_SHARE * n:
        return None
    k = max(1, n // 10)
    there = [v for v in a.loss[at : at + k] if math.isfinite(v)]
    last = [v for v in a.loss[-k:] if math.isfinite(v)]
    if not there or not last:
        return None
    begin, end = statistics.median(there), statistics.median(last)
    past = [v for v in a.loss[at:] if math.isfinite(v)]
    if max(past) - min(past) <= 1e-12 * max(1.0, abs(begin)):
        return (
            f"the fixed run's loss stood still at {begin:.4g} from step {at}, where the first "
            "run's turned non-finite: nothing trained past it"
        )
    if end > begin + LOSS_NOISE * abs(begin):
        return (
            f"the fixed run's loss did not go on past step {at}, where the first run's turned "
            f"non-finite: {begin:.4g} there, {end:.4g} at the end"
        )
    return None
