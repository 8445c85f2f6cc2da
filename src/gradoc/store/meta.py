"""The run log's ``meta`` table, typed: what gradoc records about a run as a whole.

The table is a key/value store of JSON values (``docs/run-log.md``), written a key at a time
while the run goes (:meth:`gradoc.store.RunWriter.set_meta`). :class:`RunMeta` is how it is
read: one attribute per key gradoc writes, each checked against its type when the log is
opened (a log holding another value is damaged or hand-edited, and refused). It is also the
table itself, a read-only mapping (``log.meta["status"]``), keys gradoc does not know
included: the run log's contract.

Values that are records of their own (the amp check, the batch lengths, the guard's summary,
how the loss was read) stay JSON objects: the detector that reads one owns its shape.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Union, get_args, get_origin, get_type_hints

from .._util.json_types import JsonObject
from ..errors import RunLogError


class DamagedLog(RunLogError):
    """A value in the run log that gradoc never writes (a damaged or hand-edited log)."""


def check(value: Any, kinds: type | tuple[type, ...], what: str) -> Any:
    """``value``, if it is of one of ``kinds``; otherwise the log is damaged."""
    if not isinstance(value, kinds):
        raise DamagedLog(f"{what} is {type(value).__name__}, not what gradoc writes")
    return value


@dataclass(frozen=True, eq=False)
class RunMeta(Mapping[str, Any]):
    """What the run log records about the run as a whole (absent keys: the defaults)."""

    schema_version: int | None = None
    gradoc: str | None = None
    torch: str | None = None
    python: str | None = None
    script: str | None = None
    """The script ``gradoc run`` ran (None under ``gradoc.watch``)."""
    argv: list[str] = field(default_factory=list)
    started_at: float | None = None
    ended_at: float | None = None
    duration_s: float | None = None
    status: str | None = None
    """running, finished, crashed, interrupted, gave_up, ... (None: never written)."""
    exit_code: int | None = None
    steps: int | None = None
    """Steps counted when the run closed (None: it never closed)."""
    skipped_updates: int | None = None
    ended_mid_step: bool = False
    config: JsonObject | None = None
    lr_scale: float | None = None
    guard: JsonObject | None = None
    amp: JsonObject | None = None
    """The mixed-precision check's record (``gradoc.detect.precision``)."""
    lengths: JsonObject | None = None
    """The batch lengths' summary (``gradoc.collect.probes.lengths``)."""
    launch: JsonObject | None = None
    exit_clues: list[str] = field(default_factory=list)
    printed_nonfinite_last: JsonObject | None = None
    printed_nonfinite: list[Any] = field(default_factory=list)
    loss_read: JsonObject | None = None
    loss_unread: dict[str, int] = field(default_factory=dict)
    """Steps of the primary optimizer whose loss was not read, by the reason
    (``gradoc.collect.step.loss_reading``); empty when every step's was."""
    loss_division: JsonObject | None = None
    loss_fn: JsonObject | None = None
    clipping: JsonObject | None = None
    clip_calls: int | None = None
    scaler_skipped_steps: int | None = None
    optimizers: list[JsonObject] = field(default_factory=list)
    objectives: list[JsonObject] = field(default_factory=list)
    """A run with several objectives (``gradoc.collect.step.objectives``): each one's id, name,
    optimizers, loss function and the objectives its loss reaches; empty with one."""
    side_effects: JsonObject | None = None
    functional_activations: dict[str, str] = field(default_factory=dict)
    steps_counted_by: list[str] = field(default_factory=list)
    grads_kept: JsonObject | None = None
    forward_at: JsonObject | None = None
    """Where the program first called its model with gradients (``gradoc.collect.attach.watched``):
    the file, line, code, and the variable holding the model there."""
    sampling: JsonObject | None = None
    """The sampled statistics' cadence, chosen from the run's step time
    (``gradoc.collect.step.cadence``): ``every`` (k) from step ``from``, every ``before`` steps
    until then, and the step times it was chosen from."""
    setup: JsonObject | None = None
    """What the program set up (``gradoc.collect.probes.setup``): parameters left out of every
    optimizer, modules left in eval() while it stepped."""
    segments: list[JsonObject] = field(default_factory=list)
    """A resumed run's segments, oldest first (``store.segments``); empty for one."""
    process: JsonObject | None = None
    """The process writing the log: pid, start time, host (``store.liveness``)."""
    heartbeat: float | None = None
    """When the writer last committed (seconds since the epoch; about every second)."""
    attention: JsonObject | None = None
    """The attention calls read from the loss's graph (``gradoc.collect.graph.attention``): their
    layers in forward order (``layers``: the ``attention`` table's ``site`` indexes it) and
    when they are read."""
    adam_state: JsonObject | None = None
    """The first Adam-family optimizer's second moments at the end of the run
    (``gradoc.collect.probes.adam_state``): the ``step`` read at, its ``eps``, and per weight matrix
    the share of its elements whose bias-corrected ``sqrt(v)`` is at most eps
    (``eps_share``)."""
    output_logits: JsonObject | None = None
    """The output layers whose logits the loss's log-softmaxes read
    (``gradoc.collect.graph.output_logits``): ``layers`` (the ``output_logits`` table's ``site``
    indexes it), the ``dtypes`` they computed their logits in, and when they are read."""
    logged: JsonObject | None = None
    """The measures the program logged itself (``gradoc.collect.attach.logged``): ``sources`` (each
    name's), ``declared`` (a direction the program gave a name: a checkpoint's ``mode``,
    ``greater_is_better``), ``dropped`` (values of names past the limit)."""
    penalties: JsonObject | None = None
    """The gradients the program made to differentiate again (``autograd.grad`` with
    ``create_graph=True``: a gradient penalty, ``gradoc.collect.graph.mechanics``): ``made`` (how
    many), ``unbacked`` (where the first one that no ``backward()`` reached was made: file,
    line, code, and the objective whose step it was in)."""
    compiled: bool = False
    check_numerics: bool = False
    table: Mapping[str, Any] = field(default_factory=dict, repr=False)
    """The table as read, keys gradoc does not know included."""

    @classmethod
    def of(cls, table: Mapping[str, Any]) -> RunMeta:
        """The typed meta of a table read from a run log; raises :class:`DamagedLog` where
        a value is not of the type gradoc writes."""
        known = {}
        for key, kinds in _KINDS.items():
            if key in table:
                known[key] = check(table[key], kinds, f"meta {key!r}")
        return cls(**known, table=dict(table))

    def updated(self, **items: Any) -> RunMeta:
        """This meta with ``items`` set (what the run knew in memory when its log stopped)."""
        return RunMeta.of({**self.table, **items})

    def optimizer(self) -> str | None:
        """The first optimizer's class name (``optimizers``), None when none was recorded."""
        first = self.optimizers[0] if self.optimizers else None
        kind = first.get("type") if isinstance(first, dict) else None
        return kind if isinstance(kind, str) else None

    @property
    def forward_model(self) -> str | None:
        """The name holding the model where the program first called it with gradients
        (``forward_at``), when one was found."""
        name = (self.forward_at or {}).get("model")
        return name if isinstance(name, str) else None

    @property
    def pad_id(self) -> int | None:
        """The pad token the batches' lengths were read by (``lengths``), when one was."""
        pad = (self.lengths or {}).get("pad_id")
        return pad if isinstance(pad, int) and not isinstance(pad, bool) else None

    @property
    def unmasked_param(self) -> str | None:
        """The padding-mask argument of the model's forward that was given no pads, when the
        pads were found by its ``padding_idx`` alone (``lengths``)."""
        lengths = self.lengths or {}
        param = lengths.get("mask_param") if lengths.get("unmasked") else None
        return param if isinstance(param, str) else None

    @property
    def loss_at(self) -> LossAt | None:
        """Where the loss handed to ``backward()`` was assigned last (``loss_fn.at``), with
        the autograd node of its last operation."""
        fn = self.loss_fn or {}
        at = fn.get("at") or {}
        name, file, line, node = at.get("loss"), at.get("file"), at.get("line"), fn.get("node")
        if not (isinstance(name, str) and isinstance(file, str) and isinstance(line, int)):
            return None
        return LossAt(name, file, line, node if isinstance(node, str) else None)

    @property
    def rates(self) -> list[float | None]:
        """Each optimizer's learning rate (``optimizers``), None where it is not a number."""
        return [_number(o.get("lr")) for o in self.optimizers]

    @property
    def declared(self) -> dict[str, str] | None:
        """The directions the program gave its measures itself (``logged.declared``)."""
        declared = (self.logged or {}).get("declared")
        return dict(declared) if isinstance(declared, dict) else None

    # the run log's table, as a read-only mapping
    def __getitem__(self, key: str) -> Any:
        return self.table[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.table)

    def __len__(self) -> int:
        return len(self.table)


class LossAt(NamedTuple):
    """The line that assigned the loss handed to ``backward()`` (``meta.loss_fn.at``)."""

    loss: str
    file: str
    line: int
    node: str | None


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _runtime(hint: Any) -> tuple[type, ...]:
    """The run-time types a field's annotation admits (a JSON number may be an int)."""
    if get_origin(hint) in (Union, types.UnionType):
        return tuple(t for arg in get_args(hint) for t in _runtime(arg))
    if hint is float:
        return (int, float)
    return (get_origin(hint) or hint,)


_HINTS = get_type_hints(RunMeta)
_KINDS: dict[str, tuple[type, ...]] = {
    f.name: _runtime(_HINTS[f.name]) for f in dataclasses.fields(RunMeta) if f.name != "table"
}
"""The type of every meta value gradoc writes; a log holding another is refused."""
