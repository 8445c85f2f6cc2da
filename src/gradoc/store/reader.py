"""Read a run log: the history that detectors, reports and users work from."""

from __future__ import annotations

import array
import json
import math
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import RunLogError
from .schema import SCHEMA_VERSION

_STEP_COLUMNS = ("time", "loss", "n_backward", "grad_norm", "grad_nonfinite")
_PARAM_STATS = ("grad_norm", "grad_maxabs", "grad_nonfinite", "weight_norm", "update_norm")
_ACT_STATS = ("mean", "std", "zero_frac", "sat_frac", "nonfinite", "numel", "calls", "positions")


def _value(x: Any) -> Any:
    return math.nan if x == "NaN" else x


@dataclass(frozen=True, slots=True)
class Series:
    """Values of one statistic at the steps where it was collected."""

    steps: list[int]
    values: list[float]

    def __len__(self) -> int:
        return len(self.steps)

    def at(self, step: int) -> float | None:
        """The value at ``step``, or None if it was not collected then."""
        try:
            return self.values[self.steps.index(step)]
        except ValueError:
            return None

    def first_nonfinite(self) -> int | None:
        """The first step whose value is NaN or ±Inf."""
        return next((s for s, v in zip(self.steps, self.values) if not math.isfinite(v)), None)


@dataclass(frozen=True, slots=True)
class Layer:
    """A watched parameter (``kind='param'``) or module output (``kind='module'``)."""

    id: int
    kind: str
    name: str
    module: str
    type: str | None
    shape: tuple[int, ...] | None
    numel: int | None
    group: int | None
    optimizer: int | None


@dataclass(frozen=True, slots=True)
class Event:
    step: int | None
    time: float
    kind: str
    message: str
    data: dict[str, Any]


def _resolve(path: str | Path) -> Path:
    p = Path(path)
    if p.is_dir():
        p = p / "run.db"
    if not p.exists():
        raise RunLogError(f"no run log at {path} (expected a run directory holding run.db)")
    return p


class RunLog:
    """A read-only view of one run's log (finished, crashed or still running).

    >>> run = open_run("gradoc-runs/train")           # doctest: +SKIP
    >>> run.scalar("loss").values[-1]                 # doctest: +SKIP
    0.31
    >>> run.param("fc1.weight", "grad_norm").steps    # doctest: +SKIP
    [0, 1, 2, ...]
    """

    def __init__(self, path: str | Path) -> None:
        self.path = _resolve(path)
        self.dir = self.path.parent
        try:
            self._conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            meta = self._conn.execute("SELECT key, value FROM meta").fetchall()
        except sqlite3.Error as exc:
            raise RunLogError(f"{self.path} is not a readable gradoc run log: {exc}") from None
        if version != SCHEMA_VERSION:
            raise RunLogError(
                f"{self.path} has run-log schema version {version}; this gradoc reads "
                f"version {SCHEMA_VERSION}"
            )
        self.meta: dict[str, Any] = {k: json.loads(v) for k, v in meta}
        self.layers = [
            Layer(
                id=r[0],
                kind=r[1],
                name=r[2],
                module=r[3],
                type=r[4],
                shape=tuple(json.loads(r[5])) if r[5] else None,
                numel=r[6],
                group=r[7],
                optimizer=r[8],
            )
            for r in self._query("SELECT * FROM layers ORDER BY id")
        ]
        self._by_name = {(layer.kind, layer.name): layer for layer in self.layers}

    def _query(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        try:
            return self._conn.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise RunLogError(f"{self.path} is not a readable gradoc run log: {exc}") from None

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> RunLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- per step ---------------------------------------------------------------------
    @property
    def params(self) -> list[Layer]:
        return [layer for layer in self.layers if layer.kind == "param"]

    @property
    def modules(self) -> list[Layer]:
        return [layer for layer in self.layers if layer.kind == "module"]

    @property
    def num_steps(self) -> int:
        """Steps recorded (the last step + 1 when none was lost)."""
        return int(self._query("SELECT COUNT(*) FROM steps")[0][0])

    def scalar(self, name: str) -> Series:
        """A per-step series: ``loss``, ``grad_norm``, ``grad_nonfinite``, ``n_backward``
        or ``time``."""
        if name not in _STEP_COLUMNS:
            raise KeyError(f"unknown step statistic {name!r}; one of {_STEP_COLUMNS}")
        rows = self._query(f"SELECT step, {name} FROM steps WHERE {name} IS NOT NULL ORDER BY step")
        return Series([r[0] for r in rows], [_value(r[1]) for r in rows])

    def lr(self, group: int = 0) -> Series:
        """The learning rate of one param group (of the first optimizer) per step."""
        rows = self._query("SELECT step, lr FROM steps WHERE lr IS NOT NULL ORDER BY step")
        pairs = [(s, json.loads(v)) for s, v in rows]
        return Series(
            [s for s, v in pairs if len(v) > group], [v[group] for s, v in pairs if len(v) > group]
        )

    # -- per layer --------------------------------------------------------------------
    def layer(self, name: str, kind: str = "param") -> Layer:
        try:
            return self._by_name[(kind, name)]
        except KeyError:
            raise KeyError(f"no watched {kind} named {name!r} in {self.path}") from None

    def param(self, name: str, stat: str) -> Series:
        """One parameter's series: ``grad_norm``, ``grad_maxabs``, ``grad_nonfinite``,
        ``weight_norm`` or ``update_norm``."""
        return self._layer_series("param_stats", _PARAM_STATS, self.layer(name, "param"), stat)

    def activation(self, name: str, stat: str) -> Series:
        """One module output's series: ``mean``, ``std``, ``zero_frac``, ``sat_frac``,
        ``nonfinite``, ``numel``, ``calls`` or ``positions``."""
        return self._layer_series("act_stats", _ACT_STATS, self.layer(name, "module"), stat)

    def _layer_series(
        self, table: str, allowed: tuple[str, ...], layer: Layer, stat: str
    ) -> Series:
        if stat not in allowed:
            raise KeyError(f"unknown statistic {stat!r}; one of {allowed}")
        rows = self._query(
            f"SELECT step, {stat} FROM {table} "
            f"WHERE layer_id=? AND {stat} IS NOT NULL ORDER BY step",
            (layer.id,),
        )
        return Series([r[0] for r in rows], [_value(r[1]) for r in rows])

    def unit_active(self, name: str, step: int) -> list[float] | None:
        """Per unit of a module output, the fraction of positions at which it was > 0."""
        rows = self._query(
            "SELECT unit_active FROM act_stats WHERE layer_id=? AND step=?",
            (self.layer(name, "module").id, step),
        )
        if not rows or rows[0][0] is None:
            return None
        return array.array("f", rows[0][0]).tolist()

    def steps_with(self, stat: str) -> list[int]:
        """The steps at which a per-parameter statistic was collected."""
        if stat not in _PARAM_STATS:
            raise KeyError(f"unknown statistic {stat!r}; one of {_PARAM_STATS}")
        rows = self._query(
            f"SELECT DISTINCT step FROM param_stats WHERE {stat} IS NOT NULL ORDER BY step"
        )
        return [r[0] for r in rows]

    def param_stats_at(self, step: int) -> dict[str, dict[str, float | None]]:
        """Every parameter's statistics at one step, by parameter name."""
        names = {layer.id: layer.name for layer in self.params}
        rows = self._query(
            f"SELECT layer_id, {', '.join(_PARAM_STATS)} FROM param_stats WHERE step=?", (step,)
        )
        return {names[r[0]]: dict(zip(_PARAM_STATS, map(_value, r[1:]))) for r in rows}

    def param_table(self) -> dict[str, dict[str, Series]]:
        """Every parameter's every statistic: ``{name: {stat: Series}}`` (one query)."""
        return self._table("param_stats", _PARAM_STATS, self.params)

    def activation_table(self) -> dict[str, dict[str, Series]]:
        """Every module output's every statistic: ``{name: {stat: Series}}`` (one query)."""
        return self._table("act_stats", _ACT_STATS, self.modules)

    def unit_table(self) -> dict[str, dict[int, list[float]]]:
        """Per module, per step, the per-unit activity fractions."""
        names = {layer.id: layer.name for layer in self.modules}
        out: dict[str, dict[int, list[float]]] = {}
        rows = self._query(
            "SELECT layer_id, step, unit_active FROM act_stats "
            "WHERE unit_active IS NOT NULL ORDER BY step"
        )
        for lid, step, blob in rows:
            out.setdefault(names[lid], {})[step] = array.array("f", blob).tolist()
        return out

    def _table(
        self, table: str, stats: tuple[str, ...], layers: list[Layer]
    ) -> dict[str, dict[str, Series]]:
        names = {layer.id: layer.name for layer in layers}
        out: dict[str, dict[str, Series]] = {
            name: {s: Series([], []) for s in stats} for name in names.values()
        }
        rows = self._query(f"SELECT layer_id, step, {', '.join(stats)} FROM {table} ORDER BY step")
        for lid, step, *values in rows:
            series = out[names[lid]]
            for stat, value in zip(stats, values):
                if value is not None:
                    series[stat].steps.append(step)
                    series[stat].values.append(_value(value))
        return out

    @property
    def events(self) -> list[Event]:
        rows = self._query("SELECT step, time, kind, message, data FROM events ORDER BY id")
        return [Event(s, t, k, m, json.loads(d) if d else {}) for s, t, k, m, d in rows]


def open_run(path: str | Path) -> RunLog:
    """Open a run directory (or its ``run.db``) for reading.

    >>> import gradoc
    >>> run = gradoc.open_run("gradoc-runs/train")    # doctest: +SKIP
    >>> run.scalar("grad_norm").values[:3]            # doctest: +SKIP
    [1.92, 1.88, 1.85]
    """
    return RunLog(path)
