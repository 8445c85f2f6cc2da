"""gradoc's process-wide wrappers compose with other people's and leave the user's state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

import gradoc
from gradoc.guard import lr as guard_lr
from tests.models import make, train


def test_a_wrapper_installed_over_the_backward_tap_survives_the_run(tmp_path: Path) -> None:
    original = torch.autograd.backward
    calls: list[int] = []
    model, opt = make()
    run = gradoc.watch(model, opt, out=tmp_path / "a")
    tapped = torch.autograd.backward
    assert tapped is not original

    def users(*args: Any, **kwargs: Any) -> Any:  # e.g. a profiler's, installed mid-run
        calls.append(1)
        return tapped(*args, **kwargs)

    torch.autograd.backward = users
    try:
        train(model, opt, steps=2)
        run.close()
        assert torch.autograd.backward is users  # not silently dropped at close
        train(model, opt, steps=2)  # gradoc's part passes through: nothing recorded
        assert len(calls) == 4
        with gradoc.watch(model, opt, out=tmp_path / "b") as again:
            train(model, opt, steps=3)
        assert torch.autograd.backward is users
        log = gradoc.open_run(again.dir)  # switched on again, not stacked: one loss a step
        assert log.scalar("n_backward").values == [1, 1, 1]
        assert len(log.scalar("loss").values) == 3
    finally:
        torch.autograd.backward = original
    with gradoc.watch(model, opt, out=tmp_path / "c"):
        pass
    assert torch.autograd.backward is original  # nobody else's: the original comes back


def test_the_scheduler_wrapper_keeps_a_users_wrapper(tmp_path: Path) -> None:
    base = torch.optim.lr_scheduler.LRScheduler
    original = base.__dict__["step"]
    guard_lr.install()
    ours = base.__dict__["step"]
    assert ours is not original

    def users(self: Any, *args: Any, **kwargs: Any) -> Any:
        return ours(self, *args, **kwargs)

    base.step = users  # type: ignore[method-assign]
    try:
        guard_lr.uninstall()
        assert base.__dict__["step"] is users
        _, opt = make()
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        before = opt.param_groups[0]["lr"]
        opt.step()
        sched.step()
        assert opt.param_groups[0]["lr"] == before * 0.5
    finally:
        base.step = original  # type: ignore[method-assign]
    guard_lr.install()
    guard_lr.uninstall()
    assert base.__dict__["step"] is original


def test_a_replay_leaves_the_users_anomaly_mode_rng_and_buffers(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Dropout(0.5), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.autograd.set_detect_anomaly(True, check_nan=False)  # the user's own setting
    try:
        with gradoc.watch(model, opt, out=tmp_path / "run") as run:
            for step in range(4):
                x = torch.randn(16, 4)
                if step == 2:
                    x[0, 0] = float("inf")  # a replay of this step locates the NaN
                loss = F.mse_loss(model(x), x.sum(1, keepdim=True))
                opt.zero_grad()
                loss.backward()
                after_backward = (torch.get_rng_state(), model[1].running_mean.clone())
                opt.step()
                if step == 2:
                    assert torch.equal(torch.get_rng_state(), after_backward[0])
                    assert torch.equal(model[1].running_mean, after_backward[1])
            assert torch.is_anomaly_enabled() and not torch.is_anomaly_check_nan_enabled()
        origins = [e for e in gradoc.open_run(run.dir).events if e.kind == "nonfinite_origin"]
        assert origins and origins[0].step == 2  # a replay did run
    finally:
        torch.autograd.set_detect_anomaly(False)


def test_the_rng_state_is_kept_only_for_forwards_that_draw(tmp_path: Path) -> None:
    """A replay of a dropout model starts from the RNG state its step began with (the same
    masks); a model that drew no random number in its first forwards keeps none, and its
    replay still locates."""
    for dropout in (True, False):
        torch.manual_seed(0)
        layers: list[nn.Module] = [nn.Linear(4, 8), nn.ReLU()]
        layers += [nn.Dropout(0.5)] if dropout else []
        model = nn.Sequential(*layers, nn.Linear(8, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        out = tmp_path / f"run-{dropout}"
        with gradoc.watch(model, opt, out=out) as run:
            for step in range(8):
                x = torch.randn(16, 4)
                if step == 6:
                    x[0, 0] = float("inf")
                loss = F.mse_loss(model(x), x.sum(1, keepdim=True).nan_to_num())
                opt.zero_grad()
                loss.backward()
                opt.step()
            assert run.watched.keep_rng is dropout
        origins = [e for e in gradoc.open_run(out).events if e.kind == "nonfinite_origin"]
        assert origins and origins[0].step == 6, (dropout, origins)
