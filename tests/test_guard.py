"""The guard keeps runs alive: skipped steps, adaptive clipping, rollback, DDP agreement."""

from __future__ import annotations

import contextlib
import copy
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import gradoc
from gradoc.guard import ZClip, scale_lr
from tests.models import torchrun

ROOT = Path(__file__).resolve().parent.parent


def state(model: nn.Module, opt: torch.optim.Optimizer) -> dict[str, Any]:
    """A deep copy of everything a step may change."""
    return copy.deepcopy({"model": model.state_dict(), "opt": opt.state_dict()["state"]})


def assert_same(a: Any, b: Any) -> None:
    """Bit-identical nested state (tensors compared with torch.equal)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    else:
        assert a == b


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step)
    x = torch.randn(16, 8, generator=g)
    return x, x.sum(1, keepdim=True)


# -- ZClip ----------------------------------------------------------------------------------
def test_zclip_clips_outliers_only_after_warmup_and_tracks_the_clipped_value() -> None:
    z = ZClip(alpha=0.97, z_thresh=2.5, warmup=25)
    rng = random.Random(0)
    norms = [1.0 + 0.1 * rng.gauss(0, 1) for _ in range(25)]
    assert [z.update(n) for n in norms] == [None] * 25  # warm-up never clips
    mean = sum(norms) / 25
    var = sum((n - mean) ** 2 for n in norms) / 25
    assert z.mean == pytest.approx(mean) and z.var == pytest.approx(var)
    target = z.update(100.0)  # a spike: clipped to mean + z_t * std / (z / z_t)
    std = var**0.5
    zscore = (100.0 - mean) / (std + 1e-6)
    assert target == pytest.approx(mean + 2.5 * std / (zscore / 2.5))
    assert mean < target < mean + 2.5 * std
    # the averages moved towards the clipped value, not towards 100
    assert z.mean == pytest.approx(0.97 * mean + 0.03 * target)
    assert z.mean is not None and z.mean < 1.5
    assert z.update(mean) is None  # an ordinary norm is left alone


def test_fixed_max_norm_clips_the_global_norm(tmp_path: Path) -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    with gradoc.watch(model, opt, out=tmp_path / "r", guard=gradoc.GuardConfig(clip=0.5)):
        x, y = batch(0)
        F.mse_loss(model(x), y).backward()
        before = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
        opt.step()
        after = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
    assert before > 0.5 and after == pytest.approx(0.5, rel=1e-4)
    assert [e.kind for e in gradoc.open_run(tmp_path / "r").events] == ["clipped"]


@pytest.mark.parametrize("bad", [{"clip": "other"}, {"clip": -1.0}, {"lr_backoff": 0.0}])
def test_guard_config_refuses_bad_values(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        gradoc.GuardConfig(**bad)
    with pytest.raises(TypeError):
        gradoc.WatchConfig(guard="yes")  # type: ignore[arg-type]


# -- skipping -------------------------------------------------------------------------------
OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "sgd-momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-4),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-3),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.1),
}


@pytest.mark.parametrize("name", OPTIMIZERS)
@pytest.mark.parametrize("what", ["gradient", "loss"])
@pytest.mark.parametrize(
    "options",
    [{"guard": True}, {"skip_nonfinite_updates": True}],
    ids=["guard", "skip-only"],
)
def test_skipped_step_leaves_weights_and_optimizer_state_bit_identical(
    tmp_path: Path, name: str, what: str, options: dict[str, bool]
) -> None:
    """One meaning of skipping, with a guard or with skipping alone asked for."""
    model = mlp()
    opt = OPTIMIZERS[name](model.parameters())
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)  # per step
    with gradoc.watch(model, opt, out=tmp_path / "r", **options) as run:
        for step in range(6):
            x, y = batch(step)
            loss = F.mse_loss(model(x), y)
            if step == 4 and what == "loss":
                loss = loss * float("nan")
            opt.zero_grad()
            loss.backward()
            if step == 4:
                if what == "gradient":
                    model[2].bias.grad.fill_(float("inf"))  # type: ignore[union-attr]
                before, lr, epoch = state(model, opt), opt.param_groups[0]["lr"], sched.last_epoch
            opt.step()
            sched.step()
            if step == 4:
                assert_same(state(model, opt), before)
                assert (opt.param_groups[0]["lr"], sched.last_epoch) == (lr, epoch)
    log = gradoc.open_run(run.dir)
    events = [(e.kind, e.step) for e in log.events]
    assert ("skipped_update", 4) in events
    assert log.meta["skipped_updates"] == 1  # counted once
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_skipping_off_and_a_guard_that_skips_is_refused() -> None:
    with pytest.raises(ValueError, match="contradicts"):
        gradoc.WatchConfig(guard=True, skip_nonfinite_updates=False)
    assert gradoc.WatchConfig(skip_nonfinite_updates=False).guard_config() is None
    assert gradoc.WatchConfig().guard_config() is None  # the default only observes
    assert gradoc.WatchConfig(guard=True).guard_config() == gradoc.GuardConfig()


@pytest.mark.parametrize("what", ["gradient", "loss"])
def test_by_default_a_nonfinite_step_is_applied_as_without_gradoc(
    tmp_path: Path, what: str
) -> None:
    """gradoc only observes unless a guard is asked for: same weights, bit for bit."""

    def train(watched: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = mlp()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        with gradoc.watch(model, opt, out=tmp_path / "r") if watched else contextlib.nullcontext():
            for step in range(6):
                x, y = batch(step)
                loss = F.mse_loss(model(x), y) * (
                    float("nan") if step == 4 and what == "loss" else 1
                )
                opt.zero_grad()
                loss.backward()
                if step == 4 and what == "gradient":
                    model[2].bias.grad.fill_(float("inf"))  # type: ignore[union-attr]
                opt.step()
        return [p.detach().clone() for p in model.parameters()]

    plain, watched = train(False), train(True)
    assert not all(torch.isfinite(p).all() for p in plain)  # the NaN update was applied
    for a, b in zip(plain, watched):
        assert torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())
    log = gradoc.open_run(tmp_path / "r")
    assert log.meta["skipped_updates"] == 0
    assert "skipped_update" not in [e.kind for e in log.events]


def test_the_guard_state_carries_across_a_resumed_job(tmp_path: Path) -> None:
    """A job checkpointed at step 40 and resumed clips exactly as one that never stopped."""

    def job(steps: range, out: Path, state: dict[str, Any] | None) -> tuple[Any, ...]:
        torch.manual_seed(0)
        model = mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        if state is not None:
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
        # the divergence check runs (its window is state to carry) but does not fire
        guard = gradoc.GuardConfig(zclip_warmup=10, divergence_window=5, divergence_factor=100)
        with gradoc.watch(model, opt, out=out, guard=guard) as run:
            assert run.guard is not None
            if state is not None:
                run.guard.load_state_dict(state["guard"])
            for step in steps:
                x, y = batch(step)
                loss = F.mse_loss(model(x), y) * (50.0 if step in (45, 52) else 1.0)
                opt.zero_grad()
                loss.backward()
                opt.step()
            saved = {"model": model.state_dict(), "opt": opt.state_dict()}
            saved["guard"] = run.guard.state_dict()
        return saved, run.guard_summary(), [p.detach().clone() for p in model.parameters()]

    whole, summary, weights = job(range(60), tmp_path / "whole", None)
    first, _, _ = job(range(40), tmp_path / "first", None)
    first = torch.load(_saved(tmp_path, first), weights_only=False)  # through a checkpoint
    resumed, resumed_summary, resumed_weights = job(range(40, 60), tmp_path / "second", first)
    assert summary["clipped"] >= 2  # the two spikes were clipped
    assert resumed_summary["clipped"] == summary["clipped"]  # counters carried over
    assert resumed["guard"]["zclip"] == whole["guard"]["zclip"]
    # the divergence window and best carried over (its best step counts the resumed run's
    # own steps, as every step number in its log does)
    keys = ("losses", "first", "best")
    assert [resumed["guard"]["divergence"][k] for k in keys] == [
        whole["guard"]["divergence"][k] for k in keys
    ]
    for a, b in zip(weights, resumed_weights):
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-7)


def _saved(tmp_path: Path, state: dict[str, Any]) -> Path:
    path = tmp_path / "checkpoint.pt"
    torch.save(state, path)
    return path


def test_a_per_epoch_scheduler_is_not_held_back(tmp_path: Path) -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    with gradoc.watch(model, opt, out=tmp_path / "r", guard=True):
        for step in range(12):
            x, y = batch(step)
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            if step in (3, 7):  # the last step of an epoch of 4 is skipped
                model[0].weight.grad.fill_(float("nan"))  # type: ignore[union-attr]
            opt.step()
            if step % 4 == 3:
                sched.step()
    assert sched.last_epoch == 3 and opt.param_groups[0]["lr"] == pytest.approx(0.1 * 0.5**3)


@pytest.mark.parametrize(
    "make",
    [
        lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5),
        lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda s: 1 / (1 + s)),
        lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=20),
        lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.5, total_steps=40),
    ],
    ids=["step", "lambda", "cosine", "onecycle"],
)
def test_scale_lr_carries_through_schedules(
    make: Callable[[torch.optim.Optimizer], Any],
) -> None:
    from gradoc.guard import lr as guard_lr

    lrs: list[list[float]] = []
    guard_lr.install()
    try:
        for scaled in (False, True):
            opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1, momentum=0.9)
            tracker = guard_lr.tracker(opt)
            sched = make(opt)
            seen = []
            for step in range(15):
                opt.step()
                tracker.steps += 1
                sched.step()
                if scaled and step == 5:
                    scale_lr(opt, 0.5)
                seen.append(opt.param_groups[0]["lr"])
            lrs.append(seen)
    finally:
        guard_lr.uninstall()
    plain, scaled_ = lrs
    assert scaled_[:5] == plain[:5]
    for a, b in zip(plain[5:], scaled_[5:]):  # from the scaling on, every rate is halved
        assert b == pytest.approx(0.5 * a)


# -- rollback -------------------------------------------------------------------------------
def test_rollback_restores_model_and_optimizer_exactly_and_backs_off_the_lr(
    tmp_path: Path,
) -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    cfg = gradoc.GuardConfig(snapshot_every=5, rollback_after=3)
    saved: dict[int, dict[str, Any]] = {}
    with gradoc.watch(model, opt, out=tmp_path / "r", guard=cfg) as run:
        for step in range(20):
            x, y = batch(step)
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            if step in (12, 13, 14):
                model[3].weight.grad.fill_(float("nan"))  # type: ignore[union-attr]
            saved[step] = state(model, opt)  # what the pre-step of `step` sees (BN included)
            opt.step()
            if step == 14:
                # the third bad step in a row restored the snapshot of step 10, exactly
                assert_same(state(model, opt), saved[10])
                assert opt.param_groups[0]["lr"] == pytest.approx(5e-3)
    log = gradoc.open_run(run.dir)
    rollbacks = [e for e in log.events if e.kind == "rollback"]
    assert [(e.step, e.data["to_step"], e.data["lr_scale"]) for e in rollbacks] == [(14, 10, 0.5)]
    lrs = dict(zip(log.lr().steps, log.lr().values))
    assert lrs[13] == pytest.approx(1e-2) and lrs[15] == pytest.approx(5e-3)  # in the log
    assert log.meta["guard"]["rollbacks"] == 1
    assert {e.step for e in log.events if e.kind == "skipped_update"} == {12, 13, 14}


def test_the_guard_gives_up_after_max_rollbacks_with_a_clear_error(tmp_path: Path) -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cfg = gradoc.GuardConfig(snapshot_every=2, rollback_after=2, max_rollbacks=2)
    with (
        pytest.raises(gradoc.GuardGaveUp, match=r"gave up at step .*max_rollbacks"),
        gradoc.watch(model, opt, out=tmp_path / "r", guard=cfg),
    ):
        for step in range(50):
            x, y = batch(step)
            x = x * float("nan") if step >= 4 else x  # a data source gone bad for good
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
    log = gradoc.open_run(tmp_path / "r")
    kinds = [e.kind for e in log.events]
    assert kinds.count("rollback") == 2 and kinds[-1] == "guard_gave_up"
    assert log.meta["status"] == "gave_up" and log.meta["guard"]["gave_up"] is True
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_a_diverging_loss_is_rolled_back_to_before_the_divergence(tmp_path: Path) -> None:
    torch.manual_seed(0)
    w_true = torch.randn(8, 1)
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.02)
    cfg = gradoc.GuardConfig(snapshot_every=20, divergence_window=10, clip=None)
    with gradoc.watch(model, opt, out=tmp_path / "r", guard=cfg) as run:
        for step in range(300):
            if step == 150:
                opt.param_groups[0]["lr"] = 1.5  # someone's "faster" schedule: unstable
            x = torch.randn(32, 8)
            opt.zero_grad()
            F.mse_loss(model(x), x @ w_true + 0.1 * torch.randn(32, 1)).backward()
            opt.step()
    log = gradoc.open_run(run.dir)
    rollbacks = [e for e in log.events if e.kind == "rollback"]
    assert rollbacks and "loss diverged" in rollbacks[0].data["reason"]
    assert 150 < rollbacks[0].step < 175 and rollbacks[0].data["to_step"] <= 150
    tail = sorted(log.scalar("loss").values[-50:])
    assert tail[25] < 0.5  # it trained on at the lower rate (it was ~10 at the start)
    assert opt.param_groups[0]["lr"] < 1.5
    # the report names the trouble the guard rolled back (here the blow-up that began it)
    report = json.loads((run.dir / "report.json").read_text())
    named = [f for f in report["findings"] if f["kind"] in ("loss_divergence", "loss_blowup")]
    assert named and named[0]["step"] <= rollbacks[0].step


# -- the acceptance run: faults injected into 2,000 steps -----------------------------------
def fault_run(guard: bool, inject: bool, out: Path | None = None) -> dict[str, Any]:
    """2,000 steps of a small regression; 1% of steps get NaN/Inf gradients, five a 1e4x
    spike. Returns the final full-data loss, whether a weight was ever non-finite, and the
    injected steps."""
    steps = 2000
    torch.manual_seed(0)
    x_all = torch.randn(4096, 16)
    y_all = x_all @ torch.randn(16, 1) + 0.1 * torch.randn(4096, 1)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    rng = random.Random(1)
    bad = set(rng.sample(range(30, steps), steps // 100))
    spikes = set(rng.sample(sorted(set(range(30, steps)) - bad), 5))
    run = gradoc.watch(model, opt, out=out, guard=True) if guard else None
    order = torch.Generator().manual_seed(2)
    ever_nonfinite = False
    for step in range(steps):
        idx = torch.randint(0, 4096, (32,), generator=order)
        loss = F.mse_loss(model(x_all[idx]), y_all[idx])
        opt.zero_grad()
        loss.backward()
        if inject and step in bad:
            model[0].weight.grad[0, 0] = float("nan") if step % 2 else float("inf")  # type: ignore[index]
        if inject and step in spikes:
            for p in model.parameters():
                p.grad.mul_(1e4)  # type: ignore[union-attr]
        opt.step()
        sched.step()
        ever_nonfinite |= not all(bool(torch.isfinite(p).all()) for p in model.parameters())
    if run is not None:
        run.close()
    with torch.no_grad():
        final = F.mse_loss(model(x_all), y_all).item()
    return {"final": final, "ever_nonfinite": ever_nonfinite, "bad": bad, "spikes": spikes}


def test_fault_injection_the_guard_keeps_a_2000_step_run_alive(tmp_path: Path) -> None:
    clean = fault_run(guard=False, inject=False)
    unguarded = fault_run(guard=False, inject=True)
    guarded = fault_run(guard=True, inject=True, out=tmp_path / "guarded")
    # without the guard the same run is destroyed ...
    assert unguarded["ever_nonfinite"] and not unguarded["final"] < float("inf")
    # ... with it, no weight is ever non-finite and it ends where the clean run ends
    assert not guarded["ever_nonfinite"] and not clean["ever_nonfinite"]
    assert abs(guarded["final"] - clean["final"]) <= 0.05 * clean["final"]
    # every injected step is in the run log, as skipped or clipped
    events = gradoc.open_run(tmp_path / "guarded").events
    skipped = {e.step for e in events if e.kind == "skipped_update"}
    clipped = {e.step for e in events if e.kind == "clipped"}
    assert guarded["bad"] <= skipped and guarded["spikes"] <= clipped
    assert skipped == guarded["bad"]  # and no healthy step was skipped
    for e in events:
        if e.kind == "clipped" and e.step in guarded["spikes"]:
            assert e.data["norm"] > 100 * e.data["to"]


# -- DDP: every rank takes the same decision ------------------------------------------------
@pytest.mark.parametrize("collective", [True, False])
def test_ddp_nan_on_one_rank_is_skipped_by_both(tmp_path: Path, collective: bool) -> None:
    out = tmp_path / "ddp"
    torchrun(str(ROOT / "tests" / "ddp_guard.py"), str(out), "1" if collective else "0")
    p0, p1 = (torch.load(out / f"params-{r}.pt") for r in (0, 1))
    same = all(torch.equal(a, b) for a, b in zip(p0, p1))
    skipped = [
        {e.step for e in gradoc.open_run(out / f"rank{r}").events if e.kind == "skipped_update"}
        for r in (0, 1)
    ]
    if collective:
        assert same and skipped == [{3}, {3}]
    else:  # the control: without agreement, the replicas part ways
        assert not same and skipped == [set(), {3}]
