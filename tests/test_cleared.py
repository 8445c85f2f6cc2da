"""The collector sees whether gradients are cleared between optimizer steps
(``collect/probes/cleared.py``): the same ``.grad`` tensor, changed only by the step's backward
calls, is a gradient kept; ``zero_grad`` either way, and gradient accumulation within a
step, are not."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import gradoc


def train(tmp_path: Path, step: Callable[[nn.Module, Any, int], None]) -> dict[str, Any]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    with gradoc.watch(model, opt, out=tmp_path / "run") as run:
        for i in range(8):
            step(model, opt, i)
    return gradoc.open_run(run.dir).meta.get("grads_kept") or {}


def backward(model: nn.Module, i: int, micro: int = 1) -> None:
    for m in range(micro):
        g = torch.Generator().manual_seed(10 * i + m)
        x, y = torch.randn(16, 4, generator=g), torch.randn(16, 1, generator=g)
        (F.mse_loss(model(x), y) / micro).backward()


def never_cleared(model: nn.Module, opt: Any, i: int) -> None:
    backward(model, i)
    opt.step()


def never_cleared_but_clipped(model: nn.Module, opt: Any, i: int) -> None:
    backward(model, i)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    opt.step()


def cleared(model: nn.Module, opt: Any, i: int) -> None:
    opt.zero_grad()
    backward(model, i)
    opt.step()


def zeroed_in_place(model: nn.Module, opt: Any, i: int) -> None:
    opt.zero_grad(set_to_none=False)
    backward(model, i)
    opt.step()


def accumulated_within_a_step(model: nn.Module, opt: Any, i: int) -> None:
    backward(model, i, micro=4)
    opt.step()
    opt.zero_grad()


@pytest.mark.parametrize("loop", [never_cleared, never_cleared_but_clipped])
def test_a_loop_without_zero_grad_keeps_its_gradients(tmp_path: Path, loop: Any) -> None:
    kept = train(tmp_path, loop)
    at = kept.pop("at")
    assert kept == {"kept": 7, "checked": 7, "first_kept": 1}
    # where the program steps the optimizer, and the name it has there (a fix's edit)
    assert (at["file"], at["code"], at["optimizer"]) == (__file__, "opt.step()", "opt")


@pytest.mark.parametrize("loop", [cleared, zeroed_in_place, accumulated_within_a_step])
def test_cleared_gradients_are_not_kept(tmp_path: Path, loop: Any) -> None:
    kept = train(tmp_path, loop)
    assert kept.get("kept", 0) == 0, kept
