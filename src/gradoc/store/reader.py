"""Read a run log: the history that detectors, reports and users work from."""

from __future__ import annotations

import array
import functools
import json
import math
import os
import shutil
import sqlite3
import tempfile
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._util.display import Shown
from .._util.json_types import JsonObject
from .._util.text import one_line
from ..errors import RunLogError
from .liveness import Ending, ending
from .meta import DamagedLog, RunMeta
from .meta import check as _check
from .schema import PARAM_STATS, READABLE

_STEP_COLUMNS = (
    "time",
    "loss",
    "n_backward",
    "grad_norm",
    "grad_nonfinite",
    "samples",
    "clip_norm",
    "clip_max",
)
_SINCE = {"samples": 2, "clip_norm": 4, "clip_max": 4}
"""Step columns added by a schema version (older logs have none)."""
_PARAM_STATS = PARAM_STATS
_ACT_STATS = ("mean", "std", "zero_frac", "sat_frac", "nonfinite", "numel", "calls", "positions")


def _value(x: Any) -> float:
    """A statistic as stored: a number, or the text 'NaN' (SQLite has no NaN)."""
    if type(x) is float or type(x) is int:
        return x
    if x == "NaN":
        return math.nan
    raise DamagedLog(f"a statistic holds {type(x).__name__} {one_line(repr(x)[:40])}")


def _json(text: Any, what: str) -> Any:
    if not isinstance(text, str):
        raise DamagedLog(f"{what} is not JSON text")
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise DamagedLog(f"{what} is not valid JSON") from None


def _connect(path: Path) -> tuple[sqlite3.Connection, tempfile.TemporaryDirectory[str] | None]:
    """Open a run log read-only, whatever its state.

    The path is percent-encoded into the URI (a directory named ``a?b`` or one that is not
    valid UTF-8 opens as itself). A log still in WAL mode (its run was killed) needs a
    ``-shm`` file beside it; in a read-only directory that cannot be made, so the log and
    its ``-wal`` are copied to a temporary directory and read from there (``immutable``
    would skip the WAL and with it the last steps); without a WAL, ``immutable`` does.
    """
    uri = "file:" + urllib.parse.quote(os.fsencode(os.path.abspath(path)))

    def connect(target: str, extra: str = "") -> sqlite3.Connection:
        conn = sqlite3.connect(f"{target}?mode=ro{extra}", uri=True)
        conn.execute("PRAGMA user_version").fetchone()  # sqlite opens lazily: touch it
        return conn

    try:
        return connect(uri), None
    except sqlite3.OperationalError:
        if os.access(path.parent, os.W_OK) and not _read_only(path.parent):
            raise
    wal = path.with_name(path.name + "-wal")
    if not wal.exists():
        return connect(uri, "&immutable=1"), None
    tmp = tempfile.TemporaryDirectory(prefix="gradoc-read-")
    copy = Path(tmp.name) / "run.db"
    shutil.copyfile(path, copy)
    shutil.copyfile(wal, copy.with_name("run.db-wal"))
    try:
        return connect("file:" + urllib.parse.quote(os.fsencode(copy))), tmp
    except sqlite3.Error:
        tmp.cleanup()
        raise


def _read_only(directory: Path) -> bool:
    """A directory no file can be created in (``os.access`` says yes to root)."""
    try:
        fd, name = tempfile.mkstemp(dir=directory, prefix=".gradoc-probe-")
    except OSError:
        return True
    os.close(fd)
    os.unlink(name)
    return False


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

    def nonfinite_to_the_end(self) -> int | None:
        """The step from which every value to the last is NaN or ±Inf (None: the last value
        is finite, or there is none)."""
        i = len(self.values)
        while i and not math.isfinite(self.values[i - 1]):
            i -= 1
        return self.steps[i] if i < len(self.values) else None


class _Block:
    """The ``param_arrays`` rows of one parameter set: per statistic, its steps and one
    matrix (steps x parameters) of float32, sized from the log's row counts before the rows
    stream in (``rows``: per statistic, how many rows hold it).

    NOTE: a float32 model's gradient norms and maxima were computed in float32 and stored
    as float64: float32 holds them exactly, in half the memory. A statistic with a value
    float32 does not hold exactly (measured in float64: weight and update norms, a float64
    model's, a norm measured again after it overflowed) is held in float64 from that row
    on: nothing read is rounded. A 20,000-step, 2,000-tensor run's report held ~190 MB
    more than the training process with float64 rows gathered as bytes; its close must
    stay under 500 MB."""

    def __init__(self, ids: np.ndarray[Any, Any], rows: dict[str, int]) -> None:
        self.ids = ids
        self.steps: dict[str, list[int]] = {stat: [] for stat in PARAM_STATS}
        self.data: dict[str, np.ndarray[Any, Any]] = {
            stat: np.empty((rows.get(stat, 0), ids.size), dtype=np.float32)
            for stat in PARAM_STATS
            if stat != "grad_nonfinite"
        }
        self.counts: dict[int, np.ndarray[Any, Any]] = {}  # row -> non-zero counts (rare)
        self.stats: dict[str, tuple[np.ndarray[Any, Any], np.ndarray[Any, Any] | _Counts]] = {}

    def add(self, step: int, stat: str, values: np.ndarray[Any, Any]) -> None:
        """One row's array, checked by the caller (an empty non-finite array: all 0)."""
        k = len(self.steps[stat])
        if stat == "grad_nonfinite":
            if values.size:
                self.counts[k] = values
        else:
            matrix = self.data[stat]
            if k == len(matrix):  # rows written since they were counted (a running log)
                more = np.empty((max(1, k), matrix.shape[1]), dtype=matrix.dtype)
                matrix = self.data[stat] = np.concatenate([matrix, more])
            with np.errstate(over="ignore", invalid="ignore"):  # checked just below
                matrix[k] = values
            if matrix.dtype == np.float32 and not np.array_equal(
                matrix[k], values, equal_nan=True
            ):  # not a float32 value (measured in float64): the statistic stays float64
                with np.errstate(invalid="ignore"):  # the rows not filled yet hold anything
                    matrix = self.data[stat] = matrix.astype(np.float64)
                matrix[k] = values
        self.steps[stat].append(step)

    def done(self) -> None:
        for stat, steps in self.steps.items():
            if not steps:
                continue
            matrix: np.ndarray[Any, Any] | _Counts
            if stat == "grad_nonfinite":
                matrix = _Counts(len(steps), self.counts)
            else:
                matrix = self.data[stat][: len(steps)]
            self.stats[stat] = (np.array(steps, dtype=np.int64), matrix)
        self.steps, self.data, self.counts = {}, {}, {}


class _Counts:
    """The non-finite counts of a parameter set (steps x parameters), nearly all zero: only
    the rows with a count are held (a dense matrix of a 20,000-step, 2,000-tensor run's
    zeros took 64 MB of the report's memory)."""

    def __init__(self, rows: int, nonzero: dict[int, np.ndarray[Any, Any]]) -> None:
        self.rows = rows
        self.nonzero = nonzero

    def column(self, col: int) -> np.ndarray[Any, Any]:
        """One parameter's counts at every step (as integers, as versions 1 and 2 read)."""
        out = np.zeros(self.rows, dtype=np.int64)
        for row, counts in self.nonzero.items():
            out[row] = counts[col]
        return out


SERIES_KEPT = 32
"""Decoded parameter series kept for a second look (each a Python list per step)."""


class ParamSeries(Mapping[str, Series]):
    """One parameter's statistics: by name (``PARAM_STATS``), or each as an attribute."""

    @property
    def grad_norm(self) -> Series:
        return self["grad_norm"]

    @property
    def grad_maxabs(self) -> Series:
        return self["grad_maxabs"]

    @property
    def grad_nonfinite(self) -> Series:
        return self["grad_nonfinite"]

    @property
    def weight_norm(self) -> Series:
        return self["weight_norm"]

    @property
    def update_norm(self) -> Series:
        return self["update_norm"]


class ParamDict(dict[str, Series], ParamSeries):
    """A parameter's statistics held in a dict (a v1/v2 log, a synthetic history)."""


class ActivationSeries(dict[str, Series]):
    """One module output's statistics (``ACT_STATS``): by name, or each as an attribute."""

    @property
    def std(self) -> Series:
        return self["std"]

    @property
    def sat_frac(self) -> Series:
        return self["sat_frac"]

    @property
    def numel(self) -> Series:
        return self["numel"]


class ParamTable(Mapping[str, ParamSeries]):
    """Every parameter's statistics from a schema-3 log (``param_arrays``), decoded when
    a parameter is asked for: memory holds the log's arrays, one float32 per value where
    that is exact (see ``_Block``), not a Python object per value and per step (a
    2,000-tensor run's report would otherwise hold tens of millions)."""

    def __init__(self, log: RunLog) -> None:
        names = {layer.id: layer.name for layer in log.params}
        blocks: dict[tuple[int, bytes], _Block] = {}
        stats = ", ".join(_PARAM_STATS)
        counted = ", ".join(f"COUNT({stat})" for stat in _PARAM_STATS)
        rows = {  # each parameter set's rows per statistic: its matrices are made once
            (part, ids_blob): dict(zip(_PARAM_STATS, counts))
            for part, ids_blob, *counts in log._cursor(
                f"SELECT part, layer_ids, {counted} FROM param_arrays GROUP BY part, layer_ids"
            )
        }
        sql = f"SELECT step, part, layer_ids, {stats} FROM param_arrays ORDER BY step, part"
        for step, part, ids_blob, *blobs in log._cursor(sql):
            ids = _array(ids_blob, "<i4", "a layer-id array")
            block = blocks.get((part, ids_blob))
            if block is None:
                block = blocks[(part, ids_blob)] = _Block(ids, rows.get((part, ids_blob), {}))
            for stat, blob in zip(_PARAM_STATS, blobs):
                values = _stat_array(stat, blob, ids.size)
                if values is not None:
                    block.add(_step(step), stat, values)
        self._names = list(names.values())
        self._where: dict[str, list[tuple[_Block, int]]] = {}
        for block in blocks.values():
            block.done()
            for col, lid in enumerate(block.ids.tolist()):
                self._where.setdefault(_name_of(names, lid), []).append((block, col))

        self._known = set(self._names)
        self.series = functools.lru_cache(maxsize=SERIES_KEPT)(self._series)
        """One parameter's statistic (the last few decoded are kept)."""

    def __getitem__(self, name: str) -> ParamSeries:
        if name not in self._known:
            raise KeyError(name)
        return _ParamStats(self, name)

    def _series(self, name: str, stat: str) -> Series:
        parts = [
            (steps, matrix.column(col) if isinstance(matrix, _Counts) else matrix[:, col])
            for block, col in self._where.get(name, [])
            if stat in block.stats
            for steps, matrix in [block.stats[stat]]
        ]
        if not parts:
            return Series([], [])
        steps = np.concatenate([p[0] for p in parts])
        values = np.concatenate([p[1] for p in parts])
        if len(parts) > 1:  # parameter sets that changed: in step order
            order = np.argsort(steps, kind="stable")
            steps, values = steps[order], values[order]
        return Series(steps.tolist(), values.tolist())

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


class _ParamStats(ParamSeries):
    """One parameter's statistics, each decoded when asked for."""

    def __init__(self, table: ParamTable, name: str) -> None:
        self.table, self.name = table, name

    def __getitem__(self, stat: str) -> Series:
        if stat not in _PARAM_STATS:
            raise KeyError(stat)
        return self.table.series(self.name, stat)

    def __iter__(self) -> Iterator[str]:
        return iter(_PARAM_STATS)

    def __len__(self) -> int:
        return len(_PARAM_STATS)

    def __repr__(self) -> str:
        return repr(dict(self))


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
    data: JsonObject


def _resolve(path: str | Path) -> Path:
    p = Path(path)
    if p.is_dir():
        p = p / "run.db"
    if not p.exists():
        raise RunLogError(
            f"no run log at {one_line(os.fspath(path))} (expected a run directory holding run.db)"
        )
    if not p.is_file():  # a FIFO or a device would block or never end
        raise RunLogError(f"{one_line(p)} is not a regular file, so not a run log")
    return p


def _layer_of(r: tuple[Any, ...]) -> Layer:
    """A row of the ``layers`` table, checked to be what gradoc writes."""
    if len(r) != 9:
        raise DamagedLog("the layers table has other columns than gradoc writes")
    _check(r[0], int, "a layer id")
    if r[1] not in ("param", "module"):
        raise DamagedLog(f"a layer of kind {one_line(repr(r[1])[:40])}")
    shape = _json(r[5], "a layer shape") if r[5] else None
    if shape is not None and not (isinstance(shape, list) and all(type(d) is int for d in shape)):
        raise DamagedLog("a layer shape is not a list of sizes")
    for value, types, what in (
        (r[2], str, "a layer name"),
        (r[3], str, "a layer's module"),
        (r[4], (str, type(None)), "a layer's type"),
        (r[6], (int, type(None)), "a layer's size"),
        (r[7], (int, type(None)), "a layer's param group"),
        (r[8], (int, type(None)), "a layer's optimizer"),
    ):
        _check(value, types, what)
    return Layer(
        id=r[0],
        kind=r[1],
        name=r[2],
        module=r[3],
        type=r[4],
        shape=tuple(shape) if shape is not None else None,
        numel=r[6],
        group=r[7],
        optimizer=r[8],
    )


_NONE = Series([], [])
AttentionRows = tuple[Series, Series, list[list[tuple[float, float]]]]
"""An attention call's logit gap and entropy share by step, and per step its heads' pairs."""


def _param_arrays(
    query: Any, where: str, args: tuple[Any, ...], stats: list[str] | tuple[str, ...]
) -> list[tuple[int, np.ndarray[Any, Any], dict[str, np.ndarray[Any, Any] | None]]]:
    """Decoded ``param_arrays`` rows: (step, layer ids, {stat: values or None})."""
    rows = query(
        f"SELECT step, layer_ids, {', '.join(stats)} FROM param_arrays "
        f"WHERE {where} ORDER BY step, part",
        args,
    )
    out = []
    for step, ids_blob, *blobs in rows:
        ids = _array(ids_blob, "<i4", "a layer-id array")
        arrays = {}
        for stat, blob in zip(stats, blobs):
            values = _stat_array(stat, blob, ids.size)
            if values is not None and stat == "grad_nonfinite":
                # counts, as versions 1 and 2 read (an empty array: every count 0)
                values = values.astype(np.int64) if values.size else np.zeros(ids.size, int)
            arrays[stat] = values
        out.append((_step(step), ids, arrays))
    return out


class RunLog(Shown):
    """A read-only view of one run's log (finished, crashed or still running).

    >>> import torch, gradoc
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> with gradoc.watch(model, opt, out=tmp_path / "train") as done:
    ...     for _ in range(3):
    ...         loss = model(torch.randn(8, 4)).pow(2).mean()
    ...         opt.zero_grad(); loss.backward(); opt.step()
    >>> run = open_run(done.dir)
    >>> run.scalar("loss").steps
    [0, 1, 2]
    >>> run.param("0.weight", "grad_norm").steps
    [0, 1, 2]
    """

    def __init__(self, path: str | Path) -> None:
        self.path = _resolve(path)
        self.dir = self.path.parent
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        try:
            self._conn, self._tmp = _connect(self.path)
            # NOTE: a damaged file can hold text that is not UTF-8: read text as bytes
            self._conn.text_factory = _text
        except (sqlite3.Error, OSError) as exc:
            raise RunLogError(_unreadable(self.path, exc)) from None
        try:
            version = self._query("PRAGMA user_version")[0][0]
            if version not in READABLE:
                raise RunLogError(
                    f"{one_line(self.path)} has run-log schema version {one_line(version)}; "
                    f"this gradoc reads versions {', '.join(map(str, READABLE))}"
                )
            self.version: int = version
            """The schema version the log was written with (``SCHEMA_VERSION`` now)."""
            self.meta: RunMeta = _meta(self._query("SELECT key, value FROM meta"))
            """The ``meta`` table, typed (and a read-only mapping of it)."""
            self.layers = [_layer_of(r) for r in self._query("SELECT * FROM layers ORDER BY id")]
        except BaseException:
            self.close()
            raise
        self._by_name = {(layer.kind, layer.name): layer for layer in self.layers}
        tables = {r[0] for r in self._query("SELECT name FROM sqlite_master WHERE type='table'")}
        self._arrays = "param_arrays" in tables
        self._param_table: ParamTable | None = None
        """Per-parameter statistics as packed arrays (schema 3), else one row each (1, 2)."""

    def _query(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        try:
            return self._conn.execute(sql, args).fetchall()
        except (sqlite3.Error, OverflowError, MemoryError) as exc:
            raise RunLogError(_unreadable(self.path, exc)) from None

    def close(self) -> None:
        self._conn.close()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

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

    @functools.cached_property
    def ending(self) -> Ending | None:
        """How a run that never closed stands: its process gone (``killed``, though its
        ``meta`` says ``running``) or still running; None once the run closed."""
        rows = self._query("SELECT step, time FROM steps ORDER BY step DESC LIMIT 1")
        return ending(self.meta, rows[0] if rows else None)

    @property
    def status(self) -> str | None:
        """How the run ended (``meta['status']``), ``killed`` where the log never closed and
        its process is gone."""
        return self.ending.status if self.ending is not None else self.meta.status

    @property
    def num_steps(self) -> int:
        """Steps recorded (the last step + 1 when none was lost)."""
        return int(self._query("SELECT COUNT(*) FROM steps")[0][0])

    def scalar(self, name: str) -> Series:
        """A per-step series: ``loss``, ``grad_norm``, ``grad_nonfinite``, ``n_backward``,
        ``samples`` (samples the model saw), ``time``, or the program's clipping:
        ``clip_norm`` (the norm it measured) and ``clip_max`` (its threshold)."""
        if name not in _STEP_COLUMNS:
            raise KeyError(f"unknown step statistic {name!r}; one of {_STEP_COLUMNS}")
        if self.version < _SINCE.get(name, 1):
            return Series([], [])
        rows = self._query(f"SELECT step, {name} FROM steps WHERE {name} IS NOT NULL ORDER BY step")
        return Series([_step(r[0]) for r in rows], [_value(r[1]) for r in rows])

    def objective_loss(self, objective: int) -> Series:
        """One objective's loss per step (``meta['objectives']``; 0 is ``steps.loss``)."""
        if objective == 0:
            return self.scalar("loss")
        return self._per_objective("objective_losses", "loss", objective, since=5)

    def policy_entropy(self, objective: int) -> Series:
        """An objective's policy entropy, a share of its maximum, by step (schema 6)."""
        return self._per_objective("policy_entropy", "entropy", objective, since=6)

    def attention(self, site: int) -> AttentionRows:
        """One attention call's series (``collect.graph.attention``); empty before schema 7."""
        return _attention(self._query, site) if self.version >= 7 else (_NONE, _NONE, [])

    def output_logits(self, site: int) -> tuple[Series, Series, Series]:
        """One output layer's log Z, largest logit and spread by step (schema 8)."""
        return _output_logits(self._query, site) if self.version >= 8 else (_NONE,) * 3

    def _per_objective(self, table: str, column: str, objective: int, since: int) -> Series:
        """``column`` of a per-objective table (added in schema ``since``) by step."""
        if self.version < since:
            return Series([], [])
        rows = self._query(
            f"SELECT step, {column} FROM {table} WHERE objective = ? AND {column} IS NOT NULL"
            " ORDER BY step",
            (objective,),
        )
        return Series([_step(r[0]) for r in rows], [_value(r[1]) for r in rows])

    def metrics(self) -> dict[str, str]:
        """The measures the program logged (``collect.attach.logged``), by name, with where each was
        read (``tensorboard``, ``lightning``, ``hf``, ``wandb``, ``mlflow``, ``sb3``,
        ``gym``), in the order they were first logged; empty before schema 9."""
        if self.version < 9:
            return {}
        rows = self._query("SELECT name, source, MIN(rowid) FROM metrics GROUP BY name")
        return {name: source for name, source, _ in sorted(rows, key=lambda r: r[2])}

    def metric(self, name: str) -> Series:
        """A measure the program logged, by the step in progress when it logged it (several
        values at one step where it logged several: the episodes that ended in it)."""
        if self.version < 9:
            return Series([], [])
        rows = self._query(
            "SELECT step, value FROM metrics WHERE name = ? AND value IS NOT NULL ORDER BY rowid",
            (name,),
        )
        return Series([_step(r[0]) for r in rows], [_value(r[1]) for r in rows])

    def lr(self, group: int = 0) -> Series:
        """The learning rate of one param group (of the first optimizer) per step."""
        rows = self._query("SELECT step, lr FROM steps WHERE lr IS NOT NULL ORDER BY step")
        pairs = [(s, _lrs(_json(v, "a learning rate"))) for s, v in rows]
        kept = [(s, v[group]) for s, v in pairs if len(v) > group]
        return Series([s for s, _ in kept], [v for _, v in kept])

    # -- per layer --------------------------------------------------------------------
    def layer(self, name: str, kind: str = "param") -> Layer:
        try:
            return self._by_name[(kind, name)]
        except KeyError:
            raise KeyError(f"no watched {kind} named {name!r} in {self.path}") from None

    def param(self, name: str, stat: str) -> Series:
        """One parameter's series: ``grad_norm``, ``grad_maxabs``, ``grad_nonfinite``,
        ``weight_norm`` or ``update_norm``."""
        layer = self.layer(name, "param")
        if not self._arrays:
            return self._layer_series("param_stats", _PARAM_STATS, layer, stat)
        steps, values = [], []
        for step, ids, arrays in _param_arrays(
            self._query, f"{_param_stat(stat)} IS NOT NULL", (), [stat]
        ):
            at, column = np.flatnonzero(ids == layer.id), arrays[stat]
            if at.size and column is not None:
                steps.append(step)
                values.append(column[at[0]].item())
        return Series(steps, values)

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
        return Series([_step(r[0]) for r in rows], [_value(r[1]) for r in rows])

    def unit_active(self, name: str, step: int) -> list[float] | None:
        """Per unit of a module output, the fraction of positions at which it was > 0."""
        rows = self._query(
            "SELECT unit_active FROM act_stats WHERE layer_id=? AND step=?",
            (self.layer(name, "module").id, step),
        )
        if not rows or rows[0][0] is None:
            return None
        return _units(rows[0][0])

    def steps_with(self, stat: str) -> list[int]:
        """The steps at which a per-parameter statistic was collected."""
        table = "param_arrays" if self._arrays else "param_stats"
        rows = self._query(
            f"SELECT DISTINCT step FROM {table} WHERE {_param_stat(stat)} IS NOT NULL ORDER BY step"
        )
        return [_step(r[0]) for r in rows]

    def param_stats_at(self, step: int) -> dict[str, dict[str, float | None]]:
        """Every parameter's statistics at one step, by parameter name."""
        names = {layer.id: layer.name for layer in self.params}
        rows = (
            self._param_rows("step=?", (step,))
            if self._arrays
            else self._query(
                f"SELECT step, layer_id, {', '.join(_PARAM_STATS)} FROM param_stats WHERE step=?",
                (step,),
            )
        )
        return {_name_of(names, r[1]): dict(zip(_PARAM_STATS, map(_maybe, r[2:]))) for r in rows}

    def _param_rows(self, where: str = "1", args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """``param_arrays`` as the rows of ``param_stats``: (step, layer id, stats...)."""
        out: list[tuple[Any, ...]] = []
        for step, ids, arrays in _param_arrays(self._query, where, args, _PARAM_STATS):
            n = ids.size
            columns = [[None] * n if a is None else a.tolist() for a in arrays.values()]
            out += zip([step] * n, ids.tolist(), *columns)
        return out

    def param_table(self) -> Mapping[str, ParamSeries]:
        """Every parameter's every statistic: ``{name: {stat: Series}}`` (one query). From
        a schema-3 log, a :class:`ParamTable`: the series are decoded when asked for."""
        if self._arrays:
            if self._param_table is None:  # decoded once per open log (report and charts)
                self._param_table = ParamTable(self)
            return self._param_table
        table = self._table("param_stats", _PARAM_STATS, self.params)
        return {name: ParamDict(stats) for name, stats in table.items()}

    def _cursor(self, sql: str) -> Iterator[tuple[Any, ...]]:
        """Rows one at a time (memory: one row, not the table)."""
        try:
            yield from self._conn.execute(sql)
        except (sqlite3.Error, OverflowError, MemoryError) as exc:
            raise RunLogError(_unreadable(self.path, exc)) from None

    def activation_table(self) -> dict[str, ActivationSeries]:
        """Every module output's every statistic: ``{name: {stat: Series}}`` (one query)."""
        table = self._table("act_stats", _ACT_STATS, self.modules)
        return {name: ActivationSeries(stats) for name, stats in table.items()}

    def unit_table(self) -> dict[str, dict[int, list[float]]]:
        """Per module, per step, the per-unit activity fractions."""
        names = {layer.id: layer.name for layer in self.modules}
        out: dict[str, dict[int, list[float]]] = {}
        rows = self._query(
            "SELECT layer_id, step, unit_active FROM act_stats "
            "WHERE unit_active IS NOT NULL ORDER BY step"
        )
        for lid, step, blob in rows:
            out.setdefault(_name_of(names, lid), {})[_step(step)] = _units(blob)
        return out

    def _table(
        self, table: str, stats: tuple[str, ...], layers: list[Layer]
    ) -> dict[str, dict[str, Series]]:
        names = {layer.id: layer.name for layer in layers}
        out: dict[str, dict[str, Series]] = {
            name: {s: Series([], []) for s in stats} for name in names.values()
        }
        rows = self._query(f"SELECT step, layer_id, {', '.join(stats)} FROM {table} ORDER BY step")
        for step, lid, *values in rows:
            series = out[_name_of(names, lid)]
            step = _step(step)
            for stat, value in zip(stats, values):
                if value is not None:
                    series[stat].steps.append(step)
                    series[stat].values.append(_value(value))
        return out

    @property
    def events(self) -> list[Event]:
        rows = self._query("SELECT step, time, kind, message, data FROM events ORDER BY id")
        return [_event(*r) for r in rows]


def _meta(rows: list[tuple[Any, ...]]) -> RunMeta:
    table = {}
    for key, value in rows:
        _check(key, str, "a meta key")
        table[key] = _json(value, f"meta {key!r}")
    return RunMeta.of(table)


def _text(raw: bytes) -> str:
    """SQLite text as str: gradoc writes UTF-8; bytes that are not become U+FFFD."""
    return raw.decode("utf-8", errors="replace")


def _step(x: Any) -> int:
    if type(x) is not int:
        raise DamagedLog(f"a step is {type(x).__name__}, not an integer")
    return x


def _param_stat(stat: str) -> str:
    if stat not in _PARAM_STATS:
        raise KeyError(f"unknown statistic {stat!r}; one of {_PARAM_STATS}")
    return stat


def _stat_array(stat: str, blob: Any, n: int) -> np.ndarray[Any, Any] | None:
    """One statistic of a ``param_arrays`` row, checked against the row's ``n`` layer ids
    (``None``: not collected; the non-finite counts may be empty: every count 0)."""
    if blob is None:
        return None
    values = _array(blob, "<f8", "a statistic")
    if stat == "grad_nonfinite":
        if not np.isfinite(values).all():
            raise DamagedLog("a non-finite count is not a number of values")
        if not values.size:
            return values
    if values.size != n:
        raise DamagedLog("a statistic array does not match its layer ids")
    return values


def _array(blob: Any, dtype: str, what: str) -> np.ndarray[Any, Any]:
    """A packed array as stored (``param_arrays``)."""
    size = np.dtype(dtype).itemsize
    if not isinstance(blob, bytes) or len(blob) % size:
        kind = type(blob).__name__ if not isinstance(blob, bytes) else "bytes of another size"
        raise DamagedLog(f"{what} holds {kind}, not {dtype[1:]} data")
    return np.frombuffer(blob, dtype=dtype)


def _maybe(x: Any) -> float | None:
    return None if x is None else _value(x)


def _name_of(names: dict[int, str], layer_id: Any) -> str:
    try:
        return names[layer_id]
    except (KeyError, TypeError):
        raise DamagedLog("a statistic refers to a layer the log does not list") from None


def _lrs(value: Any) -> list[float]:
    if not isinstance(value, list) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in value
    ):
        raise DamagedLog("a learning rate is not a list of numbers")
    return value


def _units(blob: Any) -> list[float]:
    if not isinstance(blob, bytes) or len(blob) % 4:
        raise DamagedLog("a unit-activity array is not float32 data")
    return array.array("f", blob).tolist()


def _event(step: Any, time: Any, kind: Any, message: Any, data: Any) -> Event:
    _check(step, (int, type(None)), "an event's step")
    _check(time, (int, float), "an event's time")
    _check(kind, str, "an event's kind")
    _check(message, str, "an event's message")
    decoded = _json(data, f"event {kind!r}'s data") if data else {}
    _check(decoded, dict, f"event {kind!r}'s data")
    return Event(step, time, kind, message, decoded)


def open_run(path: str | Path) -> RunLog:
    """Open a run directory (or its ``run.db``) for reading.

    >>> import torch, gradoc
    >>> model = torch.nn.Linear(4, 1)
    >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> with gradoc.watch(model, opt, out=tmp_path / "one-step") as done:
    ...     loss = model(torch.randn(8, 4)).pow(2).mean()
    ...     opt.zero_grad(); loss.backward(); opt.step()
    >>> run = gradoc.open_run(done.dir)
    >>> len(run.scalar("grad_norm").values)
    1
    """
    return RunLog(path)


def _unreadable(path: Path, exc: BaseException) -> str:
    return f"{one_line(path)} is not a readable gradoc run log: {one_line(exc)}"


def _head_pairs(blob: Any) -> list[tuple[float, float]]:
    """An ``attention`` row's heads: float32 (gap, share) pairs (damaged: none)."""
    if not isinstance(blob, bytes) or len(blob) % 8:
        return []
    values = np.frombuffer(blob, "=f4").astype(float).reshape(-1, 2)
    return [(float(g), float(e)) for g, e in values]


def _attention(query: Any, site: int) -> AttentionRows:
    """The ``attention`` table's rows of one call (``collect.graph.attention``), by step."""
    rows = query(
        "SELECT step, logit_gap, entropy, heads FROM attention WHERE site = ? ORDER BY step",
        (site,),
    )
    steps = [_step(r[0]) for r in rows]
    gap = Series(steps, [_value(r[1]) if r[1] is not None else math.nan for r in rows])
    share = Series(steps, [_value(r[2]) if r[2] is not None else math.nan for r in rows])
    return gap, share, [_head_pairs(r[3]) for r in rows]


def _output_logits(query: Any, site: int) -> tuple[Series, Series, Series]:
    """The ``output_logits`` table's rows of one output layer (``collect.graph.output_logits``):
    log Z, the largest logit and the spread by step."""
    rows = query(
        "SELECT step, log_z, top, spread FROM output_logits WHERE site = ? ORDER BY step", (site,)
    )
    steps = [_step(r[0]) for r in rows]
    log_z, top, spread = (
        Series(steps, [_value(r[i]) if r[i] is not None else math.nan for r in rows])
        for i in (1, 2, 3)
    )
    return log_z, top, spread
