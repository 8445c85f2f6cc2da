"""Schedules, and the docstring examples of the pure modules."""

from __future__ import annotations

import doctest

import pytest

import gradoc.schedule
import gradoc.stats.activations
import gradoc.stats.tensors
from gradoc.schedule import as_schedule, every, log_spaced, never


def test_every() -> None:
    assert [s for s in range(25) if every(10)(s)] == [0, 10, 20]
    assert all(every(1)(s) for s in range(5))


def test_log_spaced_is_dense_early_and_sparse_later() -> None:
    steps = [s for s in range(100_000) if log_spaced()(s)]
    assert steps[:10] == list(range(10))
    assert all(s % 1_000 == 0 for s in steps if s >= 10_000)  # 90 a decade
    assert len(steps) < 400  # about 90 per decade
    assert [s for s in range(300) if log_spaced(per_decade=9)(s)] == [
        *range(10),
        *range(10, 100, 10),
        100,
        200,
    ]


def test_shorthands() -> None:
    assert as_schedule(5) == every(5)
    assert as_schedule(None) == never() and as_schedule(False) == never()
    assert as_schedule(True) == every(1)
    custom = lambda s: s in (3, 7)  # noqa: E731
    assert as_schedule(custom) is custom
    with pytest.raises(TypeError):
        as_schedule("often")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        log_spaced(per_decade=0)


@pytest.mark.parametrize(
    "module", [gradoc.schedule, gradoc.stats.tensors, gradoc.stats.activations]
)
def test_docstring_examples(module: object) -> None:
    result = doctest.testmod(module, extraglobs={"torch": __import__("torch")})  # type: ignore[arg-type]
    assert result.attempted > 0 and result.failed == 0
