"""Monitoring cost that does not grow with the model's width (issue 17).

The device side reduces per-tensor statistics with foreach kernels; these tests hold the
host side to the same standard: the Python calls gradoc adds to a training step (counted
with ``sys.setprofile`` on the training thread, Python and C functions alike) do not grow
from a model of 10 parameter tensors to one of 100 or 1,000 (a wide list's reductions,
stacked by shape, add a few calls per shape, not per tensor). Timings are the benchmark's business
(``benchmarks/width.py``); calls are deterministic.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch
import torch.nn as nn

import gradoc
from gradoc.store import writer


def chain(tensors: int) -> nn.Sequential:
    return nn.Sequential(*[nn.Linear(4, 4) for _ in range(tensors // 2)])


def calls_per_step(model: nn.Module, opt: torch.optim.Optimizer, steps: list[int]) -> list[int]:
    """Python-level calls (``call`` and ``c_call`` events) of each of ``steps`` (0-based)."""
    x = torch.randn(2, 4)
    counts = []
    n = [0]

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event in ("call", "c_call"):
            n[0] += 1

    for step in range(max(steps) + 1):
        n[0] = 0
        if step in steps:
            # a collection during a counted step runs finalizers of whatever garbage the
            # process holds (other tests' too): calls of neither gradoc nor the step
            gc.collect()
            gc.disable()
            sys.setprofile(profile)
        try:
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
        finally:
            sys.setprofile(None)
            gc.enable()
        if step in steps:
            counts.append(n[0])
    return counts


def added_calls(tmp_path: Path, tensors: int, steps: list[int], **config: Any) -> list[int]:
    """The calls gradoc adds to each step: watched minus the same model trained plain."""
    torch.manual_seed(0)
    plain = chain(tensors)
    base = calls_per_step(plain, torch.optim.SGD(plain.parameters(), lr=1e-3), steps)
    model = chain(tensors)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    # the machine's timing must not decide when a transfer or a hand-over to the writer
    # thread happens: both by count only
    config = {"flush_every_s": 1e6, **config}
    out = tmp_path / f"run{tensors}"
    with mock.patch.object(writer, "STAGE_S", 1e6), gradoc.watch(model, opt, out=out, **config):
        watched = calls_per_step(model, opt, steps)
    return [w - b for w, b in zip(watched, base)]


STACKED = 40
"""Calls a wide list's stacked reductions (``stats.Plan``: 32 tensors or more sharing
shapes) add over foreach: ~5 per shape group and reduction, whatever the tensor count
(these models: 2 shapes; a weight step takes 3 reductions)."""


def same_cost(narrow: list[int], wide: list[int], slack: int = 10) -> bool:
    """The same calls on the cheapest of the steps, within ``slack``: a step that hands the
    writer thread its staged records (every ``STAGE_MAX`` records here) costs ~16 calls
    more; a call per tensor adds ~1,000 to every step. (Garbage collection is kept out of
    the counted steps: a collection in a plain step once ran another test's finalizers
    there and made gradoc's difference 60 calls smaller, failing CI.)"""
    return abs(min(wide) - min(narrow)) <= slack and max(wide) - min(wide) <= 300


def test_a_gradient_step_costs_the_same_python_calls_for_10_or_1000_tensors(
    tmp_path: Path,
) -> None:
    # the default configuration; steps 3..9 collect gradient norms only (weights and
    # activations are every 10th step), and the step's one host read decides the skip
    steps = [3, 4, 5, 6, 7, 8, 9]
    narrow = added_calls(tmp_path, 10, steps)
    middle = added_calls(tmp_path, 100, steps)
    wide = added_calls(tmp_path, 1000, steps)
    assert min(narrow) > 0  # gradoc was watching: the count measures its work
    assert same_cost(middle, wide), (middle, wide)  # both stacked by shape
    assert same_cost(narrow, wide, STACKED), (narrow, wide)


@pytest.mark.parametrize("guard", [False, True])
def test_a_weight_step_costs_the_same_python_calls_for_10_or_1000_tensors(
    tmp_path: Path, guard: bool
) -> None:
    # every step collects gradient max-abs, weights and updates (activations off: a
    # forward hook is, by PyTorch's design, a call per module)
    config = {"params": gradoc.every(1), "activations": gradoc.never(), "guard": guard}
    narrow = added_calls(tmp_path / "n", 10, [3, 4, 5, 6, 7], **config)
    middle = added_calls(tmp_path / "m", 100, [3, 4, 5, 6, 7], **config)
    wide = added_calls(tmp_path / "w", 1000, [3, 4, 5, 6, 7], **config)
    assert min(narrow) > 0
    assert same_cost(middle, wide), (middle, wide)
    assert same_cost(narrow, wide, STACKED), (narrow, wide)


def test_activation_steps_of_a_wide_model_are_spaced_out(tmp_path: Path) -> None:
    # 500 modules over a budget of 100: every 5th step of the schedule, all modules at once
    torch.manual_seed(0)
    model = chain(1000)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    with gradoc.watch(model, opt, out=tmp_path / "run", activations=gradoc.every(2)) as run:
        calls_per_step(model, opt, [0])
        for _ in range(20):
            opt.zero_grad()
            model(torch.randn(2, 4)).pow(2).mean().backward()
            opt.step()
    log = gradoc.open_run(run.dir)
    assert log.activation("0", "mean").steps == [0, 10, 20]
    assert log.activation("499", "mean").steps == [0, 10, 20]
    # within the budget nothing changes: every scheduled step
    small = chain(20)
    opt = torch.optim.SGD(small.parameters(), lr=1e-3)
    with gradoc.watch(small, opt, out=tmp_path / "small", activations=gradoc.every(2)) as run:
        calls_per_step(small, opt, [6])
    assert gradoc.open_run(run.dir).activation("9", "mean").steps == [0, 2, 4, 6]


def test_a_stacked_transfer_makes_the_rows_each_step_would() -> None:
    """Steps that took only gradient norms of the same parameters lie side by side in the
    host vector: their rows are cut from one array, and are the rows each step's own slice
    makes (a step that also took weights, another optimizer's, or a non-finite transfer
    breaks the run)."""
    import numpy as np

    from gradoc.collect.attach.layers import WatchedParam
    from gradoc.collect.probes.grads import Slices, grad_rows

    def params(first: int) -> list[WatchedParam]:
        return [
            WatchedParam(first + i, nn.Parameter(torch.ones(1)), f"p{i}", "m", 0) for i in range(3)
        ]

    mine, theirs = params(0), params(10)
    host = np.random.default_rng(0).random(40)

    def norms(step: int, at: int, present: list[WatchedParam] = mine, **more: slice) -> Slices:
        given = {"maxabs": None, "updates": None} | more
        return Slices(step, present is mine, present, {}, None, slice(at, at + 3), **given)

    targets = [
        *(norms(0, 0), norms(1, 3), norms(2, 6)),  # a run of three
        norms(3, 9, maxabs=slice(30, 33), updates=slice(33, 39)),  # weights taken: alone
        *(norms(4, 12), norms(5, 15, present=theirs), norms(6, 18), norms(7, 21)),
    ]
    rows, primary = grad_rows(targets, {}, host)
    alone = [grad_rows([sl], {}, host) for sl in targets]
    assert rows == [row for one, _ in alone for row in one]
    assert primary == {k: v for _, one in alone for k, v in one.items()}
    assert [r[0] for r in rows] == list(range(8)) and 5 not in primary
    counted = {(0, 1): 2.0}  # a non-finite transfer: each step its own row, counts in it
    rows, primary = grad_rows(targets[:3], counted, host)
    assert rows[0][5] == np.array([0.0, 2.0, 0.0]).astype("<f8").tobytes() and primary[0][1] == 2
