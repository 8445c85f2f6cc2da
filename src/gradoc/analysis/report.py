"""The typed report of a run: what the renderers, the sinks, ``gradoc fix``, ``gradoc diff``
and the distributed merge read, and what report.json holds (schema ``gradoc.report/1``,
``../shared/DESIGN.md``). Each record says how it is written to and read from JSON beside
its fields; ``gradoc.report.json`` is the one place that writes and reads the file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .._util.json_types import JsonObject
from ..detect.finding import SEVERITY_ORDER, Finding
from ..detect.precision import AmpAdvice
from ..guard import GuardSummary

REPORT_SCHEMA = "gradoc.report/1"

SERIOUS = ("error", "warning")
"""The severities that make a run's status ``problems``."""


@dataclass(frozen=True, slots=True)
class Clipping:
    """The program's own gradient clipping: its function and threshold, and how often it bit
    (the norm it measured above the threshold), with the median factor it scaled by; of the
    steps whose measured norm was finite (after a NaN every clip "bites")."""

    fn: str | None
    threshold: float | str | None
    """The threshold the program passed (``"inf"`` as report.json writes an infinity)."""
    steps: int
    bit: int
    median_factor: float | None
    norm_type: float | None = None

    def to_json(self) -> JsonObject:
        out: JsonObject = {"fn": self.fn, "threshold": self.threshold}
        if self.norm_type is not None:
            out["norm_type"] = self.norm_type
        return out | {"steps": self.steps, "bit": self.bit, "median_factor": self.median_factor}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Clipping:
        return cls(
            data.get("fn"),
            data.get("threshold"),
            data.get("steps", 0),
            data.get("bit", 0),
            data.get("median_factor"),
            data.get("norm_type"),
        )


@dataclass(frozen=True, slots=True)
class Ranks:
    """Under torchrun: the world size and the ranks whose reports were merged."""

    world_size: int
    merged: list[int]

    def to_json(self) -> JsonObject:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Segment:
    """A resumed run's segment (``store.segments``): where it started and how the one
    before it ended."""

    start_step: int
    started_at: float | None = None
    after: str | None = None
    """How the segment before ended (``killed``, ``terminated``, ...); None: the first."""
    after_last_step: int | None = None
    """The last step the segment before recorded."""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Segment:
        after = data.get("after") or {}
        return cls(
            int(data.get("start_step") or 0),
            data.get("started_at"),
            after.get("status"),
            after.get("last_step"),
        )

    def to_json(self) -> JsonObject:
        out: JsonObject = {"start_step": self.start_step, "started_at": self.started_at}
        if self.after is not None:
            out["after"] = {"status": self.after, "last_step": self.after_last_step}
        return out

    def sentence(self) -> str:
        """How the run went on here, in one sentence."""
        start, last = self.start_step, self.after_last_step
        said = f"resumed at step {start}; the run before ended ({self.after})"
        if last is None:
            return said + " before its first step"
        said += f" after step {last}"
        if last >= start:
            return said + f"; steps {start}-{last} were trained again from the checkpoint"
        if last + 1 < start:
            return said + f"; steps {last + 1}-{start - 1} were not recorded (lost with it)"
        return said


@dataclass(frozen=True, slots=True)
class ObjectiveFacts:
    """One objective of the run (``detect.training``): what it trains, the kind of training
    it was judged as and why, its loss at the first and last step, and its policy's entropy
    where one was read."""

    id: int
    name: str
    training: str
    role: str
    why: str
    optimizers: list[int]
    steps: int
    loss_first: float | None
    loss_last: float | None
    entropy_first: float | None = None
    """Its categorical policy's entropy, a share of its maximum, at the first and last step
    it was read (``collect.graph.policy``); None where no policy was seen."""
    entropy_last: float | None = None
    loss_read: int | None = None
    """The steps whose loss was read, of its ``steps`` (None in reports before it was said)."""
    loss_unread: str | None = None
    """Why the other steps had no loss read, in one sentence (None when every one had)."""

    def to_json(self) -> JsonObject:
        return asdict(self)

    @property
    def coverage(self) -> str | None:
        """``loss read on 1 of 600 steps (why)``, where some step's loss was not read."""
        if self.loss_read is None or self.loss_read >= self.steps:
            return None
        why = f" ({self.loss_unread})" if self.loss_unread else ""
        return f"loss read on {self.loss_read:,} of {self.steps:,} steps{why}"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ObjectiveFacts:
        return cls(
            int(data["id"]),
            str(data["name"]),
            str(data["training"]),
            str(data.get("role") or "loss"),
            str(data.get("why") or ""),
            [int(i) for i in data.get("optimizers") or []],
            int(data.get("steps") or 0),
            data.get("loss_first"),
            data.get("loss_last"),
            data.get("entropy_first"),
            data.get("entropy_last"),
            data.get("loss_read"),
            data.get("loss_unread"),
        )


Values = list[float | None]
"""A series' values as report.json holds them: non-finite ones as None."""


def _value(v: Any) -> float | None:
    return None if v is None else float(v)


def _values(data: Any) -> Values:
    return [_value(v) for v in data or []]


def as_floats(values: Values) -> list[float]:
    """A series' values from report.json as floats: NaN where it holds None."""
    return [math.nan if v is None else v for v in values]


@dataclass(frozen=True, slots=True)
class AttentionSeries:
    """One attention layer's largest logit gap and entropy (share of ``ln keys``) at the
    steps read, at most 100 of them (``analysis.attention_series``)."""

    layer: str
    steps: list[int]
    logit_gap: Values
    entropy: Values

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AttentionSeries:
        steps = [int(s) for s in data.get("steps") or []]
        return cls(
            str(data.get("layer")),
            steps,
            _values(data.get("logit_gap")),
            _values(data.get("entropy")),
        )


@dataclass(frozen=True, slots=True)
class OutputLogitSeries:
    """One output layer's log Z, largest logit (``top``) and spread at the steps read, in
    its dtype (``analysis.output_logit_series``)."""

    layer: str
    dtype: str | None
    steps: list[int]
    log_z: Values
    top: Values
    spread: Values

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OutputLogitSeries:
        dtype = data.get("dtype")
        return cls(
            str(data.get("layer")),
            None if dtype is None else str(dtype),
            [int(s) for s in data.get("steps") or []],
            _values(data.get("log_z")),
            _values(data.get("top")),
            _values(data.get("spread")),
        )


@dataclass(frozen=True, slots=True)
class MeasureSeries:
    """A measure the program logged itself (``detect.measures``): where it was read, which
    way is better (``up``/``down``/None) and from what, how many values, the first, last and
    best, and at most 100 of them."""

    name: str
    source: str
    direction: str | None
    direction_from: str | None
    n: int
    first: float | None
    last: float | None
    best: float | None
    steps: list[int]
    values: Values

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MeasureSeries:
        way, why = data.get("direction"), data.get("direction_from")
        return cls(
            str(data.get("name")),
            str(data.get("source")),
            None if way is None else str(way),
            None if why is None else str(why),
            int(data.get("n") or 0),
            _value(data.get("first")),
            _value(data.get("last")),
            _value(data.get("best")),
            [int(s) for s in data.get("steps") or []],
            _values(data.get("values")),
        )


@dataclass(frozen=True, slots=True)
class RunFacts:
    """report.json's ``run``: what the run was and how it ended."""

    script: str | None = None
    steps: int = 0
    duration_s: float | None = None
    torch: str | None = None
    gradoc: str | None = None
    status: str | None = None
    """How the script ended: finished, crashed, interrupted, terminated (SIGTERM), killed
    (the process is gone, the log never closed), gave_up (the guard); running."""
    ending: str | None = None
    """A run whose log never closed: how it stands, in one sentence (its process gone or
    still running, its last step and when)."""
    segments: list[Segment] = field(default_factory=list)
    """A resumed run's segments, oldest first (empty: one)."""
    exit_code: int | None = None
    guard: GuardSummary | None = None
    steps_counted_by: list[str] = field(default_factory=list)
    loss_read: str | None = None
    """How the loss was read, in one sentence (None before schema 4's logs)."""
    clipping: Clipping | None = None
    unwatched: list[str] = field(default_factory=list)
    """What of the run gradoc could not see, though it watched the steps."""
    ranks: Ranks | None = None
    objectives: list[ObjectiveFacts] = field(default_factory=list)
    """Each objective and the kind of training it was judged as (one for most runs)."""
    sampling: str | None = None
    """When weights, updates and activations were read, in one sentence (the cadence chosen
    from the step time, or the schedule given)."""
    attention: list[AttentionSeries] = field(default_factory=list)
    output_logits: list[OutputLogitSeries] = field(default_factory=list)
    metrics: list[MeasureSeries] = field(default_factory=list)
    """The measures the program logged itself."""

    def to_json(self) -> JsonObject:
        out = {
            "script": self.script,
            "steps": self.steps,
            "duration_s": self.duration_s,
            "torch": self.torch,
            "gradoc": self.gradoc,
            "status": self.status,
            "exit_code": self.exit_code,
            "guard": self.guard.to_json() if self.guard is not None else None,
            "steps_counted_by": list(self.steps_counted_by),
            "loss_read": self.loss_read,
            "clipping": self.clipping.to_json() if self.clipping is not None else None,
            "unwatched": list(self.unwatched),
            "objectives": [o.to_json() for o in self.objectives],
            "sampling": self.sampling,
        }
        if self.ranks is not None:
            out["ranks"] = self.ranks.to_json()
        if self.ending is not None:
            out["ending"] = self.ending
        if self.segments:
            out["segments"] = [s.to_json() for s in self.segments]
        if self.attention:
            out["attention"] = [a.to_json() for a in self.attention]
        if self.output_logits:
            out["output_logits"] = [o.to_json() for o in self.output_logits]
        if self.metrics:
            out["metrics"] = [m.to_json() for m in self.metrics]
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunFacts:
        guard, clipping, ranks = data.get("guard"), data.get("clipping"), data.get("ranks")
        return cls(
            script=data.get("script"),
            steps=data.get("steps") or 0,
            duration_s=data.get("duration_s"),
            torch=data.get("torch"),
            gradoc=data.get("gradoc"),
            status=data.get("status"),
            ending=data.get("ending"),
            segments=[Segment.from_json(x) for x in data.get("segments") or []],
            exit_code=data.get("exit_code"),
            guard=GuardSummary.from_json(guard) if guard else None,
            steps_counted_by=[str(c) for c in data.get("steps_counted_by") or []],
            loss_read=data.get("loss_read"),
            clipping=Clipping.from_json(clipping) if clipping else None,
            unwatched=[str(u) for u in data.get("unwatched") or []],
            ranks=Ranks(ranks["world_size"], list(ranks["merged"])) if ranks else None,
            objectives=[ObjectiveFacts.from_json(o) for o in data.get("objectives") or []],
            sampling=data.get("sampling"),
            attention=[AttentionSeries.from_json(a) for a in data.get("attention") or []],
            output_logits=[OutputLogitSeries.from_json(o) for o in data.get("output_logits") or []],
            metrics=[MeasureSeries.from_json(m) for m in data.get("metrics") or []],
        )


@dataclass(frozen=True, slots=True)
class Report:
    """A run's diagnosis: its status, what it was, and its findings, most important first
    (the first warning or error is the headline)."""

    status: str
    """``healthy``, ``problems`` or ``not_watched`` (no step was seen: never healthy)."""
    run: RunFacts = field(default_factory=RunFacts)
    findings: list[Finding] = field(default_factory=list)
    not_watched: str | None = None
    """Why no step was watched, when none was."""
    amp: AmpAdvice | None = None
    """The mixed-precision readiness (``--check amp``)."""

    @property
    def serious(self) -> list[Finding]:
        """The findings of severity error or warning, most important first."""
        return [f for f in self.findings if f.severity in SERIOUS]

    @property
    def headline(self) -> Finding | None:
        return next(iter(self.serious), None)

    def failing(self, at: str) -> bool:
        """Some finding is at least as severe as ``at`` (``"warning"`` or ``"error"``)."""
        return any(SEVERITY_ORDER[f.severity] <= SEVERITY_ORDER[at] for f in self.findings)

    def with_findings(self, findings: list[Finding], ranks: Ranks | None = None) -> Report:
        """This report with other findings (and ranks): its status follows them."""
        status = "problems" if any(f.severity in SERIOUS for f in findings) else self.status
        run = replace(self.run, ranks=ranks) if ranks is not None else self.run
        return replace(self, status=status, run=run, findings=findings)

    def to_json(self) -> JsonObject:
        out: JsonObject = {"schema": REPORT_SCHEMA, "status": self.status}
        if self.not_watched:
            out["not_watched"] = self.not_watched
        out["run"] = self.run.to_json()
        out["findings"] = [f.to_json() for f in self.findings]
        if self.amp is not None:
            out["amp"] = self.amp.to_json()
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Report:
        amp = data.get("amp")
        return cls(
            status=data["status"],
            run=RunFacts.from_json(data.get("run") or {}),
            findings=[Finding.from_json(f) for f in data.get("findings", [])],
            not_watched=data.get("not_watched"),
            amp=AmpAdvice.from_json(amp) if amp else None,
        )
