"""A finding: one problem the run log shows, as typed records in the shape of report.json.

The records (``Evidence``, ``Hypothesis`` with its ``Sign``s, ``Fix``, ``RuledOut``) are
what detectors and the diagnosis write and what renderers read; :meth:`Finding.to_json`
is the one place they become report.json's dictionaries (the report's schema:
``report/json.py``).

How hypotheses are ranked, the one rule: each hypothesis lists the signs it predicts,
each checked against the run and found ``seen``, ``contradicted`` or ``not observed``
(the run did not show it either way: nothing sampled then, nothing recorded). Its score is

    score = base + sum(weight of seen signs) - sum(weight of contradicted signs)

Signs not observed count 0: absence is never support. The weights (``Weight``) are ``DECISIVE`` (3:
the run shows the cause itself, e.g. the operation that made the NaN), ``STRONG`` (2: a
sign only this cause predicts, e.g. units dead before any update for an initialisation),
``MODERATE`` (1) and ``WEAK`` (0.5: consistent with it, but with others too). ``base``
(at most 0.3) is how common the cause is for the symptom; it orders causes that no
evidence separates, nothing more. Hypotheses are ranked by score, then base; the likelihood
shown is ``high`` at a score of 2 or more, ``medium`` at 1 or more, ``low`` below.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Final, Literal, TypedDict, TypeVar

from .._util.json_types import JsonObject
from .._util.text import StrEnum

Severity = Literal["error", "warning", "info"]


Kind = str
"""A finding kind's name (``"exploding_gradients"``): each kind is a class of
``gradoc.findings``, whose ``name`` this is; ``findings.REGISTRY`` knows them all."""

SEVERITY_ORDER: dict[str, int] = {"error": 0, "warning": 1, "info": 2}
"""Most severe first."""


class Family(StrEnum):
    """The kind of root cause a hypothesis names: stable where its words are not."""

    LEARNING_RATE = "learning_rate"
    INITIALIZATION = "initialization"
    NUMERICS = "numerics"
    DATA = "data"
    ARCHITECTURE = "architecture"
    PRECISION = "precision"
    MASKING = "masking"
    BATCHING = "batching"
    GRADIENTS = "gradients"
    LOOP = "loop"
    """The training loop's code: gradients never cleared, parameters left out of training."""
    REGULARIZATION = "regularization"
    """A penalty that outweighs the loss (weight decay strong enough to pin the weights), or
    too little of one (a model that fits its training data and less and less the rest)."""


FAMILIES: dict[Family, str] = {
    Family.LEARNING_RATE: "the learning rate or its schedule",
    Family.INITIALIZATION: "the scale or sign of the initial weights and biases",
    Family.NUMERICS: "a numerically unsafe operation in the user's code",
    Family.DATA: "the inputs or labels: non-finite, extreme, corrupted or unlearnable",
    Family.ARCHITECTURE: "the model's structure: saturating activations, depth without "
    "normalisation, an ungated recurrence, a logit scale",
    Family.PRECISION: "values outside the range of a low-precision dtype",
    Family.MASKING: "padding that reaches the outputs or the loss",
    Family.BATCHING: "how batches are formed",
    Family.GRADIENTS: "the gradients themselves, with no upstream cause identified",
    Family.LOOP: "the training loop: gradients never cleared, parameters that never train",
    Family.REGULARIZATION: "weight decay or another penalty that outweighs the loss, or too "
    "little regularisation: overfitting",
}


class Horizon(StrEnum):
    IMMEDIATE = "immediate"
    SHORT_TERM = "short-term"
    LONG_TERM = "long-term"


HORIZONS = tuple(Horizon)


class Weight:
    """The weights of a sign (the module docstring's rule)."""

    DECISIVE: Final = 3.0
    """The run shows the cause itself (the operation that made the NaN)."""
    STRONG: Final = 2.0
    """A sign only this cause predicts."""
    MODERATE: Final = 1.0
    WEAK: Final = 0.5
    """Consistent with the cause, and with others too."""


class State(StrEnum):
    """What the run showed of a sign a hypothesis predicts."""

    SEEN = "seen"
    CONTRADICTED = "contradicted"
    NOT_OBSERVED = "not observed"


@dataclass(slots=True)
class Evidence:
    """A signal, with the value observed (``type``: metric, distribution, code, log)."""

    signal: str
    value: Any
    step: int | None = None
    type: str = "metric"
    extra: JsonObject = field(default_factory=dict)
    """Further typed values (``steps``, ``of``, ``argument``) that renderers may show."""

    @classmethod
    def of(cls, data: Evidence | JsonObject) -> Evidence:
        if isinstance(data, Evidence):
            return data
        rest = {k: v for k, v in data.items() if k not in ("signal", "value", "step", "type")}
        return cls(
            data["signal"], data.get("value"), data.get("step"), data.get("type", "metric"), rest
        )

    def to_json(self) -> JsonObject:
        out: JsonObject = {"signal": self.signal, "value": self.value}
        if self.step is not None:
            out["step"] = self.step
        return out | self.extra | {"type": self.type}


@dataclass(slots=True)
class Sign:
    """One thing a hypothesis predicts, checked against the run: a typed fact with the step
    and value it was read at. ``weight`` is how much it tells (the module docstring's rule)."""

    claim: str
    state: State
    weight: float
    step: int | None = None
    value: float | str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Sign:
        return cls(
            data["claim"], State(data["state"]), data["weight"], data.get("step"), data.get("value")
        )

    def to_json(self) -> JsonObject:
        out: JsonObject = {"claim": self.claim, "state": str(self.state), "weight": self.weight}
        if self.step is not None:
            out["step"] = self.step
        if self.value is not None:
            out["value"] = self.value
        return out


@dataclass(slots=True)
class Hypothesis:
    family: Family
    cause: str
    check: str
    """How to verify it."""
    base: float = 0.0
    """Its base rate among the causes of this symptom, in score units; small (<= 0.3), so
    that it only orders causes the run's evidence does not separate."""
    signs: list[Sign] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.family = Family(self.family)

    def sign(
        self,
        claim: str,
        state: State,
        weight: float,
        step: int | None = None,
        value: float | str | None = None,
    ) -> Sign:
        made = Sign(claim, state, weight, step, value)
        self.signs.append(made)
        return made

    def seen(self, claim: str, weight: float, **at: Any) -> Sign:
        return self.sign(claim, State.SEEN, weight, **at)

    def against(self, claim: str, weight: float, **at: Any) -> Sign:
        return self.sign(claim, State.CONTRADICTED, weight, **at)

    def unseen(self, claim: str, weight: float = 0.0, **at: Any) -> Sign:
        return self.sign(claim, State.NOT_OBSERVED, weight, **at)

    def claims(self, state: State) -> list[str]:
        return [s.claim for s in self.signs if s.state is state]

    @property
    def score(self) -> float:
        """The module docstring's rule."""
        seen = sum(s.weight for s in self.signs if s.state is State.SEEN)
        against = sum(s.weight for s in self.signs if s.state is State.CONTRADICTED)
        return self.base + seen - against

    @property
    def likelihood(self) -> str:
        return "high" if self.score >= 2 else "medium" if self.score >= 1 else "low"

    @property
    def confirmed(self) -> bool:
        """Some sign of it was seen in this run."""
        return any(s.state is State.SEEN for s in self.signs)

    def to_json(self) -> JsonObject:
        return {
            "cause": self.cause,
            "family": str(self.family),
            "likelihood": self.likelihood,
            "score": round(self.score, 2),
            "support": self.claims(State.SEEN),
            "against": self.claims(State.CONTRADICTED),
            "not_observed": self.claims(State.NOT_OBSERVED),
            "signs": [s.to_json() for s in self.signs],
            "check": self.check,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Hypothesis:
        """As report.json holds it: its base is what its score keeps beyond its signs."""
        made = cls(Family(data["family"]), data["cause"], data.get("check") or "")
        made.signs = [Sign.from_json(s) for s in data.get("signs", [])]
        made.base = data.get("score", 0.0) - (made.score - made.base)
        return made


def rank(hypotheses: list[Hypothesis]) -> list[Hypothesis]:
    """Most likely first, by the module docstring's rule."""
    return sorted(hypotheses, key=lambda h: (-h.score, -h.base))


@dataclass(slots=True)
class CodeLine:
    """A line of the user's code: where a code change goes."""

    file: str
    line: int | None
    code: str | None

    def to_json(self) -> JsonObject:
        return {"file": self.file, "line": self.line, "code": self.code}

    @classmethod
    def from_json(cls, data: Any) -> CodeLine | None:
        """The line from report.json; None for what gradoc never writes."""
        if not isinstance(data, Mapping) or not isinstance(data.get("file"), str):
            return None
        line, code = data.get("line"), data.get("code")
        return cls(
            data["file"],
            line if isinstance(line, int) else None,
            code if isinstance(code, str) else None,
        )


@dataclass(slots=True)
class Fix:
    horizon: Horizon
    action: str
    apply: JsonObject | None = None
    """What ``gradoc run --fix`` can apply without a code change (``{"lr_scale": 0.1}``)."""
    code: CodeLine | None = None
    """Where the code change goes, when the origin names it."""

    def __post_init__(self) -> None:
        self.horizon = Horizon(self.horizon)

    def to_json(self) -> JsonObject:
        out: JsonObject = {"horizon": str(self.horizon), "action": self.action}
        if self.apply is not None:
            out["apply"] = self.apply
        if self.code is not None:
            out["code"] = self.code.to_json()
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Fix:
        code = CodeLine.from_json(data.get("code"))
        return cls(Horizon(data["horizon"]), data["action"], data.get("apply"), code)


@dataclass(slots=True)
class RuledOut:
    cause: str
    why: str

    def to_json(self) -> JsonObject:
        return {"cause": self.cause, "why": self.why}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RuledOut:
        return cls(data["cause"], data["why"])


@dataclass(slots=True)
class Reading:
    """A value measured where a NaN/Inf was born (an origin's evidence): the op's
    arguments, the failing batch's inputs, the optimizer's eps and state."""

    signal: str
    value: Any
    extra: JsonObject = field(default_factory=dict)
    """Named values beside it that diagnoses read: ``argument`` (an input of the batch),
    ``eps`` and ``dtype`` (an optimizer's eps in the weights' dtype), ``state`` and ``of``
    (exact zeros of an optimizer's state), ``count``, ``names``."""

    def to_json(self) -> JsonObject:
        return {"signal": self.signal, "value": self.value} | self.extra

    @classmethod
    def from_json(cls, data: Any) -> Reading | None:
        """A reading from report.json or a run log; None for what gradoc never writes."""
        if not isinstance(data, Mapping) or not isinstance(data.get("signal"), str):
            return None
        extra = {k: v for k, v in data.items() if k not in ("signal", "value")}
        return cls(data["signal"], data.get("value"), extra)


@dataclass(slots=True)
class Mechanism:
    """Why a NaN/Inf was born where it was (an origin's ``mechanism``): the numerical
    mechanism read from the op and the ops that made its operands on the failing step (an
    ``exp`` that underflowed before a ``log``, a ``sigmoid`` that rounded to 1), and the
    stable idiom that removes it (``torch.logsumexp``). ``locate.mechanism`` reads it; its
    catalogue lists every ``name``."""

    kind: str
    """underflow | saturation | overflow | zero | domain | masking | inherited"""
    name: str
    """The mechanism (``exp_sum_underflow``, ``sigmoid_rounded``, ...)."""
    said: str
    """The mechanism in the run's numbers."""
    idiom: str
    """The stable form that removes it, as code where there is one."""
    evidence: list[Reading] = field(default_factory=list)

    def to_json(self) -> JsonObject:
        return {
            "kind": self.kind,
            "name": self.name,
            "said": self.said,
            "idiom": self.idiom,
            "evidence": [r.to_json() for r in self.evidence],
        }

    @classmethod
    def from_json(cls, data: Any) -> Mechanism | None:
        if not isinstance(data, Mapping) or not isinstance(data.get("name"), str):
            return None
        readings = data.get("evidence")
        readings = readings if isinstance(readings, list) else []
        return cls(
            str(data.get("kind", "")),
            data["name"],
            str(data.get("said", "")),
            str(data.get("idiom", "")),
            [r for r in map(Reading.from_json, readings) if r is not None],
        )


@dataclass(slots=True)
class SourceLines:
    """The lines of a file around an origin's line, as they were when the run happened."""

    start: int
    """The number of the first line."""
    lines: list[str]

    def to_json(self) -> JsonObject:
        return {"start": self.start, "lines": self.lines}

    @classmethod
    def from_json(cls, data: Any) -> SourceLines | None:
        """The lines from report.json or a run log; None for what gradoc never writes."""
        if not isinstance(data, Mapping):
            return None
        start, lines = data.get("start"), data.get("lines")
        if not isinstance(start, int) or not isinstance(lines, list):
            return None
        if not all(isinstance(t, str) for t in lines):
            return None
        return cls(start, lines)

    def around(self, line: int) -> bool:
        """Whether ``line`` is among these lines."""
        return self.start <= line < self.start + len(self.lines)


@dataclass(kw_only=True, slots=True)
class Origin:
    """Where a NaN/Inf was born (report.json's ``origin``): the operation, the module
    running it and the line of the user's code, found by ``gradoc.locate``."""

    phase: str
    """forward | backward | input | optimizer"""
    step: int
    op: str | None = None
    module: str | None = None
    file: str | None = None
    line: int | None = None
    code: str | None = None
    evidence: list[Reading] = field(default_factory=list)
    note: str | None = None
    """How it was found, e.g. on the next occurrence with tracing armed."""
    source: SourceLines | None = None
    """The lines around ``line`` as they were when the run happened. Reports show these
    and never open ``file`` (a run directory may come from someone else, and its ``file``
    could name anything)."""
    late: bool = False
    """Found a step late: the step's gradients were not read at their step (a lean step,
    see ``collect.step.cadence``), so where in its pass the value was born needs a re-run."""
    mechanism: Mechanism | None = None
    """Why the value was non-finite there, and the idiom that removes it."""

    def to_json(self) -> JsonObject:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["evidence"] = [r.to_json() for r in self.evidence]
        out["source"] = self.source.to_json() if self.source is not None else None
        out["mechanism"] = self.mechanism.to_json() if self.mechanism is not None else None
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Origin:
        plain = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        readings = data.get("evidence")
        readings = readings if isinstance(readings, list) else []
        plain["evidence"] = [r for r in map(Reading.from_json, readings) if r is not None]
        plain["source"] = SourceLines.from_json(data.get("source"))
        plain["mechanism"] = Mechanism.from_json(data.get("mechanism"))
        return cls(**plain)


@dataclass(slots=True)
class Related:
    """A finding folded into another's story, as its consequence or its cause."""

    kind: Kind
    step: int | None
    layer: str | None
    summary: str

    def to_json(self) -> JsonObject:
        return {"kind": self.kind, "step": self.step, "layer": self.layer, "summary": self.summary}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Related:
        return cls(data["kind"], data.get("step"), data.get("layer"), data["summary"])


class Details:
    """A finding kind's typed details: what its rule measured and its explanation reasons
    with, written as report.json's ``details``. Each kind with details declares its own
    dataclass on this one, in its module; its fields, in order, are the JSON's keys."""

    def to_json(self) -> JsonObject:
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    @classmethod
    def of(cls: type[D], details: Details | Mapping[str, Any]) -> D:
        """These details, typed: as the rule made them, or read back from report.json or a
        run log's event (the keys this class has; a missing one raises ``TypeError``)."""
        made = cls.known(details)
        if made is None:
            missing = ", ".join(cls._missing(details)) or type(details).__name__
            raise TypeError(f"details of {missing} are not {cls.__name__}")
        return made

    @classmethod
    def known(cls: type[D], details: Details | Mapping[str, Any]) -> D | None:
        """:meth:`of`, or None where ``details`` are not these (a finding made by hand)."""
        if isinstance(details, cls):
            return details
        if isinstance(details, Details) or cls._missing(details):
            return None
        names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
        return cls(**{name: details[name] for name in names if name in details})

    @classmethod
    def _missing(cls, details: Details | Mapping[str, Any]) -> list[str]:
        if isinstance(details, Details):
            return []
        return [
            f.name
            for f in fields(cls)  # type: ignore[arg-type]
            if f.name not in details and f.default is MISSING and f.default_factory is MISSING
        ]

    @classmethod
    def in_(cls: type[D], f: Finding) -> D | None:
        """``f``'s details when they are of this class, None otherwise: a kind with several
        rules has a class for each, told apart in JSON by their field ``rule``'s default."""
        if isinstance(f.details, cls):
            return f.details
        rule = next((x.default for x in fields(cls) if x.name == "rule"), None)  # type: ignore[arg-type]
        if isinstance(f.details, dict) and rule is not None and f.details.get("rule") == rule:
            return cls.of(f.details)
        return None


D = TypeVar("D", bound=Details)


class Told(TypedDict, total=False):
    """What a kind tells of its finding beyond its head (its severity, step, layer and
    summary): :class:`Finding`'s other fields, as ``FindingKind.found`` takes them."""

    evidence: list[Evidence]
    hypotheses: list[Hypothesis]
    ruled_out: list[RuledOut]
    fixes: list[Fix]
    origin: Origin | None
    symptom: str | None
    root_cause: str | None
    root_cause_family: Family | None
    monitoring: list[str]
    related: list[Related]
    details: Details | JsonObject
    rank: int | None
    objective: str | None
    step_from: int | None


@dataclass(kw_only=True, slots=True)
class Finding:
    kind: Kind
    """The finding kind's name (a class of ``gradoc.findings``)."""
    severity: Severity
    step: int | None
    """The first step at which the problem was seen."""
    layer: str | None
    """The module's fully qualified name (``''`` is the model itself), if one is involved."""
    summary: str
    evidence: list[Evidence] = field(default_factory=list)
    """The signals, each with the observed value."""
    hypotheses: list[Hypothesis] = field(default_factory=list)
    """Ranked causes, most likely first (the module docstring's rule)."""
    ruled_out: list[RuledOut] = field(default_factory=list)
    """Common wrong diagnoses, each with the run's own numbers."""
    fixes: list[Fix] = field(default_factory=list)
    origin: Origin | None = None
    symptom: str | None = None
    """What a person sees, in one sentence."""
    root_cause: str | None = None
    root_cause_family: Family | None = None
    """The family of the first hypothesis: stable where ``root_cause``'s words are not."""
    monitoring: list[str] = field(default_factory=list)
    related: list[Related] = field(default_factory=list)
    """Findings folded into this one as its consequences or causes: kind, step, summary."""
    details: Details | JsonObject = field(default_factory=dict)
    """Typed facts the diagnosis reasons with, the kind's own :class:`Details` (a spike's
    ratio, a blow-up's peak): rewording a summary or a signal can never change a diagnosis.
    A finding read back from JSON holds the JSON object, which its kind reads with
    :meth:`Details.of`; a kind with nothing to add leaves it empty."""
    rank: int | None = None
    """Under torchrun, the rank that saw it when rank 0 did not (the merged report)."""
    objective: str | None = None
    """In a run with several objectives, the one whose loss this finding judged (its name,
    ``critic``); None for the run's only objective or a finding about the whole run."""
    step_from: int | None = None
    """Where ``step`` is a read of a signal read every k steps (the gradients' norms on a lean
    stretch, ``collect.step.cadence``): the earliest step the problem may have begun at."""

    def __post_init__(self) -> None:
        self.evidence = [Evidence.of(e) for e in self.evidence]

    def to_json(self) -> JsonObject:
        data: JsonObject = {
            "kind": self.kind,
            "severity": self.severity,
            "step": self.step,
            "layer": self.layer,
            "summary": self.summary,
            "evidence": [e.to_json() for e in self.evidence],
            "hypotheses": [h.to_json() for h in self.hypotheses],
            "ruled_out": [r.to_json() for r in self.ruled_out],
            "fixes": [f.to_json() for f in self.fixes],
            "symptom": self.symptom,
            "root_cause": self.root_cause,
            "root_cause_family": str(self.root_cause_family) if self.root_cause_family else None,
            "monitoring": list(self.monitoring),
            "related": [r.to_json() for r in self.related],
            "details": (
                self.details.to_json() if isinstance(self.details, Details) else dict(self.details)
            ),
        }
        if self.origin is not None:
            data["origin"] = self.origin.to_json()
        if self.rank is not None:
            data["rank"] = self.rank
        if self.objective is not None:
            data["objective"] = self.objective
        if self.step_from is not None:
            data["step_from"] = self.step_from
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Finding:
        """A finding as report.json holds it (:meth:`to_json` read back)."""
        family = data.get("root_cause_family")
        origin = data.get("origin")
        return cls(
            kind=data["kind"],
            severity=data["severity"],
            step=data.get("step"),
            layer=data.get("layer"),
            summary=data["summary"],
            evidence=[Evidence.of(e) for e in data.get("evidence", [])],
            hypotheses=[Hypothesis.from_json(h) for h in data.get("hypotheses", [])],
            ruled_out=[RuledOut.from_json(r) for r in data.get("ruled_out", [])],
            fixes=[Fix.from_json(x) for x in data.get("fixes", [])],
            origin=Origin.from_json(origin) if origin is not None else None,
            symptom=data.get("symptom"),
            root_cause=data.get("root_cause"),
            root_cause_family=Family(family) if family else None,
            monitoring=list(data.get("monitoring", [])),
            related=[Related.from_json(r) for r in data.get("related", [])],
            details=dict(data.get("details") or {}),
            rank=data.get("rank"),
            objective=data.get("objective"),
            step_from=data.get("step_from"),
        )
