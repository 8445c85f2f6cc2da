"""The history detectors read: the run log in memory, or one built by hand in tests."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..store import ActivationSeries, Layer, ParamDict, ParamSeries, RunLog, Series
from ..store.meta import RunMeta
from ..store.reader import Event
from .measures import Measure, Trend, measures, role, trend
from .training import Objective, Returns, judge

_EMPTY = Series([], [])


@dataclass(frozen=True, slots=True)
class Attention:
    """One attention call of the model, as read from the loss's graph (``collect.graph.attention``):
    its layer, its largest logit gap (nats) and its rows' mean entropy as a share of
    ``ln(keys)`` at the steps it was read, and per step its heads' (gap, share)."""

    layer: str
    gap: Series
    entropy: Series
    heads: list[list[tuple[float, float]]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class OutputLogits:
    """One output layer's logits as the loss's log-softmax read them
    (``collect.graph.output_logits``): the rows' mean log-sum-exp ``log Z``, largest logit and
    spread (largest less smallest) at the steps read, and the dtype they were computed in."""

    layer: str
    dtype: str
    log_z: Series
    top: Series
    spread: Series


@dataclass(slots=True)
class History:
    """Per-step scalars, per-parameter and per-module series, layer metadata.

    ``params`` and ``modules`` are in registration order, which for ordinary models is the
    order of the forward pass (input side first).
    """

    loss: Series = field(default_factory=lambda: Series([], []))
    grad_norm: Series = field(default_factory=lambda: Series([], []))
    grad_nonfinite: Series = field(default_factory=lambda: Series([], []))
    lr: Series = field(default_factory=lambda: Series([], []))
    samples: Series = field(default_factory=lambda: Series([], []))
    """Samples the watched model saw per step (absent from logs before schema 2)."""
    clip_norm: Series = field(default_factory=lambda: Series([], []))
    """The norm the program's own clipping measured, before it clipped (schema 4)."""
    clip_max: Series = field(default_factory=lambda: Series([], []))
    """... and its threshold."""
    params: list[Layer] = field(default_factory=list)
    modules: list[Layer] = field(default_factory=list)
    param_stats: Mapping[str, ParamSeries] = field(default_factory=dict)
    act_stats: dict[str, ActivationSeries] = field(default_factory=dict)
    units: dict[str, dict[int, list[float]]] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    meta: RunMeta = field(default_factory=RunMeta)
    objective_losses: dict[int, Series] = field(default_factory=dict)
    """The losses of a run's objectives other than the first (whose loss is ``loss``), by
    ``meta.objectives`` id."""
    policy_entropy: dict[int, Series] = field(default_factory=dict)
    """A categorical policy's entropy (a share of its maximum) by objective id, where the
    loss's graph showed one (``collect.graph.policy``)."""
    attention: list[Attention] = field(default_factory=list)
    """The model's attention calls in forward order, where the loss's graph showed some."""
    output_logits: list[OutputLogits] = field(default_factory=list)
    """The output layers under the loss's log-softmaxes, nearest the loss first."""
    logged: dict[str, tuple[str, Series]] = field(default_factory=dict)
    """The measures the program logged itself, by name: (where read, the values by step)."""
    counted: int | None = None
    """The steps the run counted (``run.num_steps``; None in a history made by hand): its
    loss was read on ``len(loss)`` of them."""
    derived: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """Values computed from the fields above, kept so that the detectors and the diagnosis
    that each ask for them compute them once (:func:`gradoc.detect.signals.weight_params`,
    :func:`~gradoc.detect.signals.update_ratios`). A history is read, not changed, once
    detection starts."""

    @classmethod
    def load(cls, run: RunLog) -> History:
        """Read everything detectors need from a run log (a handful of queries)."""
        return cls(
            loss=run.scalar("loss"),
            grad_norm=run.scalar("grad_norm"),
            grad_nonfinite=run.scalar("grad_nonfinite"),
            lr=run.lr(0),
            samples=run.scalar("samples"),
            clip_norm=run.scalar("clip_norm"),
            clip_max=run.scalar("clip_max"),
            params=run.params,
            modules=run.modules,
            param_stats=run.param_table(),
            act_stats=run.activation_table(),
            units=run.unit_table(),
            events=run.events,
            meta=run.meta,
            objective_losses={
                int(o["id"]): run.objective_loss(int(o["id"]))
                for o in run.meta.objectives
                if int(o["id"]) != 0
            },
            policy_entropy={
                k: found
                for k in {0, *(int(o["id"]) for o in run.meta.objectives)}
                if (found := run.policy_entropy(k))
            },
            attention=_attention(run),
            output_logits=_output_logits(run),
            logged={name: (source, run.metric(name)) for name, source in run.metrics().items()},
            counted=run.num_steps,
        )

    @property
    def measures(self) -> list[Measure]:
        """The program's own measures, each with the way it is better (``measures``)."""
        found = self.derived.get("measures")
        if found is None:
            declared = (self.meta.logged or {}).get("declared")
            found = self.derived["measures"] = measures(
                self.logged, declared if isinstance(declared, dict) else None
            )
        return found  # type: ignore[no-any-return]

    @property
    def objectives(self) -> list[Objective]:
        """The run's objectives, each judged as its kind of training (``training``)."""
        found = self.derived.get("objectives")
        if found is None:
            found = self.derived["objectives"] = judge(
                self.meta,
                lambda k: self.loss if k == 0 else self.objective_losses.get(k, _EMPTY),
                lambda k: self.policy_entropy.get(k, _EMPTY),
                self.counted,
                self._returns(),
            )
        return found  # type: ignore[no-any-return]

    def return_trend(self) -> Trend | None:
        """What the program's episode return (or reward) did: its first return measure that
        worsened, else its first with a trend; None where it logged none."""
        trends = [t for m in self.measures if role(m.name) == "return" for t in [trend(m)] if t]
        return next((t for t in trends if t.verdict == "worsened"), trends[0] if trends else None)

    def _returns(self) -> Returns:
        """What the program's return did, for judging its objectives."""
        read = any(role(m.name) == "return" for m in self.measures)
        t = self.return_trend()
        worse = t is not None and t.verdict == "worsened"
        return Returns(read, worse, t.said() if t is not None and worse else "")

    def of_objective(self, objective: Objective) -> History:
        """This history as one objective's: its loss series in place of the run's."""
        return replace(self, loss=objective.loss, derived={})

    def param(self, name: str, stat: str) -> Series:
        stats = self.param_stats.get(name)
        return _EMPTY if stats is None else stats.get(stat, _EMPTY)

    def act(self, name: str, stat: str) -> Series:
        stats = self.act_stats.get(name)
        return _EMPTY if stats is None else stats.get(stat, _EMPTY)

    def module_of(self, param: str) -> str | None:
        return next((p.module for p in self.params if p.name == param), None)

    def module_type(self, name: str) -> str | None:
        return next((m.type for m in self.modules if m.name == name), None)

    @property
    def num_steps(self) -> int:
        if self.counted is not None:
            return self.counted
        return len(self.loss.steps) if self.loss.steps else len(self.grad_norm.steps)

    @property
    def loss_covered(self) -> bool:
        """The loss was read on enough of the run's steps to be judged (``training.COVERED``)."""
        objectives = self.objectives
        return not objectives or objectives[0].covered


def _attention(run: RunLog) -> list[Attention]:
    said = run.meta.attention or {}
    layers = said.get("layers")
    if not isinstance(layers, list):
        return []
    return [Attention(str(name), *run.attention(site)) for site, name in enumerate(layers)]


def _output_logits(run: RunLog) -> list[OutputLogits]:
    said = run.meta.output_logits or {}
    layers, dtypes = said.get("layers"), said.get("dtypes")
    if not isinstance(layers, list):
        return []
    if not isinstance(dtypes, list) or len(dtypes) != len(layers):
        dtypes = ["unknown"] * len(layers)
    return [
        OutputLogits(str(name), str(dtype), *run.output_logits(site))
        for site, (name, dtype) in enumerate(zip(layers, dtypes))
    ]


def synthetic(
    *,
    loss: Sequence[float] | None = None,
    grad_norms: dict[str, Sequence[float]] | None = None,
    param_stats: dict[str, dict[str, Sequence[float]]] | None = None,
    param_types: dict[str, str] | None = None,
    shapes: dict[str, tuple[int, ...]] | None = None,
    acts: dict[str, dict[str, Sequence[float]]] | None = None,
    act_steps: Sequence[int] | None = None,
    module_types: dict[str, str] | None = None,
    units: dict[str, dict[int, list[float]]] | None = None,
) -> History:
    """A history from plain lists (one value per step from 0), for detector tests.

    ``grad_norms`` are per-parameter gradient norms; the global norm and non-finite
    counts follow from them. ``param_stats`` add other statistics (``weight_norm``,
    ``update_norm`` ...). ``acts`` are per-module output statistics at ``act_steps``.
    """
    grad_norms = dict(grad_norms or {})
    stats: dict[str, dict[str, Series]] = {}
    for name, values in grad_norms.items():
        stats.setdefault(name, {})["grad_norm"] = _series(values)
        stats[name]["grad_nonfinite"] = _series([0.0 if math.isfinite(v) else 1.0 for v in values])
    for name, by_stat in (param_stats or {}).items():
        for stat, values in by_stat.items():
            stats.setdefault(name, {})[stat] = _series(values)
    n = max((len(v) for v in grad_norms.values()), default=0)
    total = [math.sqrt(sum(v[i] ** 2 for v in grad_norms.values() if i < len(v))) for i in range(n)]
    nonfinite = [
        float(sum(1 for v in grad_norms.values() if i < len(v) and not math.isfinite(v[i])))
        for i in range(n)
    ]
    names = list(stats)
    params = [
        Layer(
            id=i,
            kind="param",
            name=name,
            module=name.rpartition(".")[0],
            type=(param_types or {}).get(name),
            shape=(shapes or {}).get(name, (4, 4)),
            numel=None,
            group=0,
            optimizer=0,
        )
        for i, name in enumerate(names)
    ]
    act_steps = list(
        act_steps
        if act_steps is not None
        else range(max((len(v) for m in (acts or {}).values() for v in m.values()), default=0))
    )
    modules = [
        Layer(
            id=len(names) + i,
            kind="module",
            name=name,
            module=name,
            type=(module_types or {}).get(name),
            shape=None,
            numel=None,
            group=None,
            optimizer=None,
        )
        for i, name in enumerate(acts or {})
    ]
    return History(
        loss=_series(loss or []),
        grad_norm=_series(total),
        grad_nonfinite=_series(nonfinite),
        params=params,
        modules=modules,
        param_stats={name: ParamDict(by_stat) for name, by_stat in stats.items()},
        act_stats={
            m: ActivationSeries(
                {stat: Series(act_steps[: len(v)], list(v)) for stat, v in by_stat.items()}
            )
            for m, by_stat in (acts or {}).items()
        },
        units=units or {},
    )


def _series(values: Sequence[float]) -> Series:
    return Series(list(range(len(values))), [float(v) for v in values])
