"""Schedules: plain ``step -> bool`` callables that say when to collect.

Steps count optimizer steps from 0. Any callable ``(int) -> bool`` is a schedule;
these helpers cover the common cases and print readably in the run metadata.

>>> from gradoc.schedule import every, log_spaced, never
>>> [s for s in range(30) if every(10)(s)]
[0, 10, 20]
>>> [s for s in range(0, 300) if log_spaced(per_decade=9)(s)][:12]
[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20]
>>> never()(0)
False
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

Schedule = Callable[[int], bool]


@dataclass(frozen=True, slots=True)
class every:
    """Collect on steps 0, n, 2n, ... (``every(1)`` is every step)."""

    n: int

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"every(n) needs an integer n >= 1, got {self.n!r}")

    def __call__(self, step: int) -> bool:
        return step % self.n == 0


@dataclass(frozen=True, slots=True)
class log_spaced:
    """Dense early, sparse later: about ``per_decade`` steps per decade.

    Every step below ``dense`` is collected. Within the decade [10^k, 10^(k+1)) the
    stride is ``max(1, 9 * 10^k // per_decade)``, so ``per_decade=9`` gives
    1..9, 10, 20, ..., 90, 100, 200, ... and ``per_decade=90`` one step in ten per decade.
    """

    per_decade: int = 90
    dense: int = 10

    def __post_init__(self) -> None:
        if self.per_decade < 1 or self.dense < 0:
            raise ValueError("log_spaced needs per_decade >= 1 and dense >= 0")

    def __call__(self, step: int) -> bool:
        if step < max(self.dense, 1):
            return True
        decade = 10 ** int(math.log10(step))
        return bool(step % max(1, 9 * decade // self.per_decade) == 0)


@dataclass(frozen=True, slots=True)
class budget:
    """Sampled on a time budget, the default for weights, updates and activations: every
    ``dense`` steps until step ``until``, then every k-th step, k chosen once per run at step
    ``choose_at`` from the program's own measured step time, so that the sampled steps cost
    about ``share`` of the training time (k a round number, at least ``dense``, at most
    1,000). The choice is fixed for the run and recorded in its log (``meta['sampling']``,
    see :mod:`gradoc.collect.step.cadence`). Called outside a run, it is the dense cadence.

    >>> [s for s in range(30) if budget()(s)]
    [0, 10, 20]
    """

    share: float = 0.03
    dense: int = 10
    choose_at: int = 50
    until: int = 200

    def __post_init__(self) -> None:
        if not 0 < self.share < 1 or self.dense < 1 or not 0 < self.choose_at <= self.until:
            raise ValueError("budget needs 0 < share < 1, dense >= 1 and 0 < choose_at <= until")

    def __call__(self, step: int) -> bool:
        return step % self.dense == 0


@dataclass(frozen=True, slots=True)
class lean:
    """Every step, unless the program's steps are too short for the per-step reads to fit:
    the default for the gradients' norms. The reads (each gradient's norm, in one reduction,
    and one host read of them with the loss) may take ``reads_share`` of the per-step budget,
    the larger of ``share`` of the step and ``floor_ms``; where they take more, they are read
    every k-th step from ``budget().until`` on, k the smallest round number that fits,
    chosen with the sampled statistics' cadence and recorded with it. The loss is read every
    step either way. Only a run whose weights and activations sample on a :class:`budget`
    times its steps; elsewhere (``--sample-every``), and under a guard, this is every step.
    ``every``: that k, fixed, whatever the reads cost (the same schedule otherwise: every
    step to ``until``, and on every sampled step).

    >>> [s for s in range(3) if lean()(s)]
    [0, 1, 2]
    """

    share: float = 0.03
    floor_ms: float = 0.1
    reads_share: float = 0.25
    every: int | None = None

    def __post_init__(self) -> None:
        if not 0 < self.share < 1 or self.floor_ms < 0 or not 0 < self.reads_share <= 1:
            raise ValueError("lean needs 0 < share < 1, floor_ms >= 0 and 0 < reads_share <= 1")
        if self.every is not None and (isinstance(self.every, bool) or self.every < 1):
            raise ValueError(f"lean(every=...) must be a step count >= 1, not {self.every!r}")

    def budget_s(self, step_s: float) -> float:
        """What the reads may take of a step of ``step_s`` seconds."""
        return self.reads_share * max(self.share * step_s, self.floor_ms / 1e3)

    def __call__(self, step: int) -> bool:
        return True


def lean_reads(step: int, until: int, kg: int | None, every: int | None) -> bool:
    """Whether a lean cadence reads the gradients at ``step``: every step before ``until``,
    then every ``kg``-th and every sampled (``every``-th) one (``collect.step.cadence``; the report
    dates a gradient finding by it)."""
    if kg is None or kg <= 1 or step < until:
        return True
    return step % kg == 0 or (every is not None and every > 0 and step % every == 0)


@dataclass(frozen=True, slots=True)
class never:
    """Never collect (turns a statistic off)."""

    def __call__(self, step: int) -> bool:
        return False


def as_schedule(value: Schedule | int | bool | None) -> Schedule:
    """Accept the shorthands users write: ``10`` for every(10), ``None``/``False`` for off."""
    if value is None or value is False:
        return never()
    if value is True:
        return every(1)
    if isinstance(value, int):
        return every(value)
    if callable(value):
        return value
    raise TypeError(f"a schedule is a step -> bool callable or an int, got {value!r}")
