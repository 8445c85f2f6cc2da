"""gradoc.watch on real training loops, checked against the slow per-parameter way."""

from __future__ import annotations

import math
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import gradoc
from gradoc.collect.attach import taps
from gradoc.collect.step.transfers import Transfers
from tests.models import Net, batch, make, one_step, train

RTOL = 1e-5


def test_statistics_match_slow_reference_with_accumulation_frozen_and_unused(
    tmp_path: Path,
) -> None:
    model, opt = make()
    expected: list[dict[str, dict[str, float]]] = []
    losses: list[list[float]] = []
    named = dict(model.named_parameters())
    with gradoc.watch(model, opt, out=tmp_path / "run", params=1, activations=1) as run:
        for step in range(6):
            opt.zero_grad()
            micro = []
            for m in range(3):  # gradient accumulation: three backward calls per step
                x, y = batch(step, m)
                loss = F.mse_loss(model(x), y) / 3
                loss.backward()
                micro.append(loss.item())
            losses.append(micro)
            ref = {
                n: {"grad_norm": p.grad.norm().item(), "grad_maxabs": p.grad.abs().max().item()}
                for n, p in named.items()
                if p.grad is not None
            }
            before = {n: p.detach().clone() for n, p in named.items() if p.grad is not None}
            opt.step()
            for n in ref:
                ref[n]["weight_norm"] = before[n].norm().item()  # the weights the update met
                ref[n]["update_norm"] = (named[n].detach() - before[n]).norm().item()
            expected.append(ref)
    log = gradoc.open_run(run.dir)
    assert log.num_steps == 6
    assert log.scalar("n_backward").values == [3] * 6
    # each micro-batch's loss was divided by 3 before its backward: the step's loss is the
    # mean of the undivided losses (their sum), as the program optimises it
    assert log.scalar("loss").values == pytest.approx([sum(m) for m in losses], rel=RTOL)
    assert log.meta["loss_division"] == {"undone": True, "by": 3.0}
    for step, ref in enumerate(expected):
        got = log.param_stats_at(step)
        # frozen and unused parameters have no gradient: no rows, no crash
        assert (
            set(got)
            == set(ref)
            == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "head.weight", "head.bias"}
        )
        for name, stats in ref.items():
            for key, value in stats.items():
                assert got[name][key] == pytest.approx(value, rel=RTOL), (step, name, key)
            assert got[name]["grad_nonfinite"] == 0
        total = math.sqrt(sum(s["grad_norm"] ** 2 for s in ref.values()))
        assert log.scalar("grad_norm").at(step) == pytest.approx(total, rel=RTOL)
    assert log.lr(0).values == [1e-2] * 6 and log.lr(1).values == [3e-3] * 6
    layers = {p.name: p for p in log.params}
    assert layers["frozen.weight"].group == 0 and layers["unused.bias"].group == 1
    assert layers["fc2.weight"].module == "fc2" and layers["fc2.weight"].shape == (8, 16)


def test_global_norm_matches_torch_get_total_norm(tmp_path: Path) -> None:
    model, opt = make(lr_groups=False)
    norms = []
    with gradoc.watch(model, opt, out=tmp_path / "run") as run:
        for step in range(4):
            x, y = batch(step)
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            grads = [p.grad for p in model.parameters() if p.grad is not None]
            norms.append(torch.nn.utils.get_total_norm(grads).item())
            opt.step()
    assert gradoc.open_run(run.dir).scalar("grad_norm").values == pytest.approx(norms, rel=RTOL)


def test_activation_statistics_match_hooked_reference(tmp_path: Path) -> None:
    model, opt = make()
    seen: dict[str, list[torch.Tensor]] = {}
    for name in ("fc1", "act", "gate"):
        getattr(model, name).register_forward_hook(
            lambda m, i, o, name=name: seen.setdefault(name, []).append(o.detach().clone())
        )
    with gradoc.watch(model, opt, out=tmp_path / "run", activations=gradoc.every(2)) as run:
        train(model, opt, steps=4, accum=2)
    log = gradoc.open_run(run.dir)
    assert log.activation("fc1", "mean").steps == [0, 2]  # the schedule holds
    assert "unused" not in {m.name for m in log.modules if log.activation(m.name, "calls").steps}
    for name in ("fc1", "act", "gate"):
        for step in (0, 2):
            outs = torch.cat(seen[name][2 * step : 2 * step + 2]).double()  # both micro-batches
            assert log.activation(name, "calls").at(step) == 2
            # float32 sums near a mean of 0: compare with an absolute floor
            assert log.activation(name, "mean").at(step) == pytest.approx(
                outs.mean().item(), rel=RTOL, abs=1e-6
            )
            assert log.activation(name, "std").at(step) == pytest.approx(
                outs.std(unbiased=False).item(), rel=RTOL
            )
            assert log.activation(name, "zero_frac").at(step) == pytest.approx(
                (outs == 0).float().mean().item()
            )
    units = log.unit_active("act", 2)
    ref = (torch.cat(seen["act"][4:6]) > 0).float().mean(0)
    assert units == pytest.approx(ref.tolist(), abs=1e-6)
    sat = torch.cat(seen["gate"][4:6])
    assert log.activation("gate", "sat_frac").at(2) == pytest.approx(
        (sat * (1 - sat) < 0.0025).float().mean().item()
    )
    assert log.activation("fc1", "sat_frac").steps == []  # not a saturating family


@pytest.mark.parametrize("batch", [8, 128])  # small outputs summarised together, large at once
def test_an_output_changed_in_place_later_is_summarised_as_the_module_returned_it(
    tmp_path: Path, batch: int
) -> None:
    # ReLU(inplace=True) overwrites the Linear's output: the Linear's statistics are of
    # what it returned (no zeros), the ReLU's of what came out of it (about half zeros)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 64), nn.ReLU(inplace=True), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch, 4)
    with torch.no_grad():
        before = model[0](x)
    with gradoc.watch(model, opt, out=tmp_path / "run", activations=1) as run:
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    log = gradoc.open_run(run.dir)
    assert log.activation("0", "zero_frac").at(0) == 0.0
    assert log.activation("0", "mean").at(0) == pytest.approx(before.mean().item(), abs=1e-6)
    assert 0.3 < log.activation("1", "zero_frac").at(0) < 0.7


def test_losses_are_bit_identical_with_and_without_gradoc(tmp_path: Path) -> None:
    model, opt = make()
    plain = train(model, opt, steps=8, accum=2)
    plain_weights = [p.detach().clone() for p in model.parameters()]
    model, opt = make()
    with gradoc.watch(model, opt, out=tmp_path / "run", params=1, activations=1):
        watched = train(model, opt, steps=8, accum=2)
    assert torch.equal(torch.stack(plain), torch.stack(watched))
    for a, b in zip(plain_weights, model.parameters()):
        assert torch.equal(a, b)


def test_nonfinite_gradients_are_counted_and_recorded_as_events(tmp_path: Path) -> None:
    model, opt = make(lr_groups=False)
    with gradoc.watch(model, opt, out=tmp_path / "run") as run:

        def poison() -> None:
            model.fc2.weight.grad[0, :3] = torch.tensor([math.nan, math.inf, -math.inf])

        for step in range(5):
            one_step(model, opt, step, after_backward=poison if step == 3 else None)
    log = gradoc.open_run(run.dir)
    stats = log.param_stats_at(3)
    assert stats["fc2.weight"]["grad_nonfinite"] == 3
    assert math.isnan(stats["fc2.weight"]["grad_norm"])
    assert stats["fc2.weight"]["grad_maxabs"] is None  # max-abs follows the params schedule
    assert stats["fc1.weight"]["grad_nonfinite"] == 0
    assert log.scalar("grad_nonfinite").values[:4] == [0, 0, 0, 3]
    assert math.isnan(log.scalar("grad_norm").at(3))  # NaN survives the round trip
    # gradoc only observes: the poisoned update is applied, as without gradoc, so the
    # weights, and step 4's loss, are NaN
    assert [(e.kind, e.step) for e in log.events][:2] == [
        ("nonfinite_grad", 3),
        ("nonfinite_loss", 4),
    ]
    assert log.meta["skipped_updates"] == 0
    assert math.isnan(log.scalar("loss").at(4) or 0.0)


def test_only_the_steps_whose_norms_are_nonfinite_are_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a transfer holding a non-finite value (a poisoned gradient; a sampled step's
    # activation statistics hold NaN by design) counts values only where an optimizer's
    # own norms are non-finite: no look at each gradient of every healthy step it carries
    from gradoc.collect.step import transfers

    counted: list[int] = []

    def spy(sl: Any, host: Any) -> dict[int, float]:
        counted.append(sl.step)
        return received_counts(sl, host)

    received_counts = transfers.received_counts
    monkeypatch.setattr(transfers, "received_counts", spy)
    model, opt = make(lr_groups=False)
    with gradoc.watch(model, opt, out=tmp_path / "run", activations=1) as run:

        def poison() -> None:
            model.fc2.weight.grad[0, :2] = torch.tensor([math.nan, math.inf])

        for step in range(6):
            one_step(model, opt, step, after_backward=poison if step == 3 else None)
    # step 3's update, applied as without gradoc, leaves NaN weights: 4 and 5 are bad too
    assert counted == [3, 4, 5]
    log = gradoc.open_run(run.dir)
    assert log.scalar("grad_nonfinite").values[:4] == [0, 0, 0, 2]
    assert all(n > 0 for n in log.scalar("grad_nonfinite").values[4:])
    assert log.param_stats_at(3)["fc2.weight"]["grad_nonfinite"] == 2


def test_loss_capture_forms(tmp_path: Path) -> None:
    model, opt = make(lr_groups=False)
    pytorchs = (torch.autograd.backward, torch.autograd.grad, torch.optim.Optimizer.__init__)
    with gradoc.watch(model, opt, out=tmp_path / "run") as run:
        x, y = batch(0)
        opt.zero_grad()
        torch.autograd.backward(F.mse_loss(model(x), y))  # the functional form
        opt.step()
        opt.zero_grad()
        out = model(x)
        out.backward(torch.ones_like(out))  # the loss whose gradient it computes: out.sum()
        opt.step()
    log = gradoc.open_run(run.dir)
    assert log.scalar("n_backward").values == [1, 1]
    assert log.scalar("loss").steps == [0, 1]
    assert log.scalar("loss").values[1] == pytest.approx(float(out.detach().sum()), rel=RTOL)
    # PyTorch's own functions are back
    assert (
        torch.autograd.backward,
        torch.autograd.grad,
        torch.optim.Optimizer.__init__,
    ) == pytorchs
    assert not taps._receivers  # the tap is removed when the last run closes


def test_two_runs_in_one_process_keep_their_own_losses(tmp_path: Path) -> None:
    a, opt_a = make(lr_groups=False)
    b, opt_b = make(lr_groups=False)
    mine: dict[str, list[float]] = {"a": [], "b": []}
    ra = gradoc.watch(a, opt_a, out=tmp_path / "a")
    with gradoc.watch(b, opt_b, out=tmp_path / "b") as rb:
        for step in range(3):
            mine["a"].append(one_step(a, opt_a, step))
            mine["b"].append(one_step(b, opt_b, step, scale=10.0))
    ra.close()
    la, lb = gradoc.open_run(ra.dir).scalar("loss"), gradoc.open_run(rb.dir).scalar("loss")
    assert la.values == pytest.approx(mine["a"], rel=RTOL)
    assert lb.values == pytest.approx(mine["b"], rel=RTOL)
    assert gradoc.open_run(ra.dir).scalar("n_backward").values == [1, 1, 1]


def test_losses_of_uncollected_steps_are_kept(tmp_path: Path) -> None:
    model, opt = make(lr_groups=False)
    with gradoc.watch(
        model, opt, out=tmp_path / "run", grads=gradoc.every(4), params=None, activations=None
    ) as run:
        losses = train(model, opt, steps=10)
    log = gradoc.open_run(run.dir)
    assert log.scalar("loss").values == pytest.approx([v.item() for v in losses], rel=RTOL)
    assert log.scalar("grad_norm").steps == [0, 4, 8]
    assert log.activation("fc1", "mean").steps == []


def test_crash_inside_the_context_is_recorded_and_report_written(tmp_path: Path) -> None:
    model, opt = make(lr_groups=False)
    run = gradoc.watch(model, opt, out=tmp_path / "run")
    with pytest.raises(RuntimeError, match="data loader died"), run:
        train(model, opt, steps=3)
        raise RuntimeError("data loader died")
    log = gradoc.open_run(run.dir)
    assert log.meta["status"] == "crashed" and log.meta["steps"] == 3
    assert [e.kind for e in log.events] == ["crash"]
    assert (tmp_path / "run" / "report.json").exists()


def test_several_optimizers(tmp_path: Path) -> None:
    gen, disc = nn.Linear(3, 3), nn.Linear(3, 1)
    og, od = torch.optim.SGD(gen.parameters(), lr=0.1), torch.optim.SGD(disc.parameters(), lr=0.1)
    run = gradoc.watch([gen, disc], og, out=tmp_path / "run")
    run.attach([gen, disc], od)
    for _ in range(3):
        od.zero_grad()
        disc(gen(torch.randn(4, 3)).detach()).mean().backward()
        od.step()
        og.zero_grad()
        disc(gen(torch.randn(4, 3))).mean().backward()
        og.step()
    run.close()
    log = gradoc.open_run(run.dir)
    names = {p.name for p in log.params}
    assert names == {"linear0.weight", "linear0.bias", "linear1.weight", "linear1.bias"}
    assert log.num_steps == 3  # steps are counted by the first optimizer
    assert len(log.param("linear1.weight", "grad_norm")) == 3


def test_bounded_queue_and_thinning_keep_everything_needed(tmp_path: Path) -> None:
    model, opt = make(lr_groups=False)
    with gradoc.watch(
        model,
        opt,
        out=tmp_path / "run",
        queue_size=1,
        flush_every_steps=5,
        keep_recent_steps=40,
        keep_old_steps=16,
        activations=1,
        grads=1,  # every step's rows, to thin (a lean cadence would read fewer)
    ):

        def poison() -> None:
            model.fc1.bias.grad[0] = math.nan  # an event step is never thinned

        for step in range(300):
            one_step(model, opt, step % 7, after_backward=poison if step == 77 else None)
            model.fc1.bias.data.nan_to_num_(0.0)
    db = sqlite3.connect(tmp_path / "run" / "run.db")
    assert db.execute("select count(*) from steps").fetchone()[0] == 300
    kept = [r[0] for r in db.execute("select distinct step from param_arrays order by step")]
    old = [s for s in kept if s < 300 - 40 - 10]
    assert 77 in kept and 0 in kept
    assert len(old) <= 16 + 2  # bounded, whatever the run length
    assert set(range(300 - 40, 300)) <= set(kept)  # recent steps at full resolution
    acts = [r[0] for r in db.execute("select distinct step from act_stats")]
    assert len(acts) <= len(kept)


def test_config_is_validated() -> None:
    with pytest.raises(ValueError):
        gradoc.WatchConfig(flush_every_s=0)
    with pytest.raises(ValueError):
        gradoc.every(0)
    with pytest.raises(TypeError):
        gradoc.WatchConfig(grads="often")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        gradoc.watch(
            Net(), torch.optim.SGD(Net().parameters(), lr=1), config=gradoc.WatchConfig(), grads=1
        )


def test_a_running_run_can_be_read_live(tmp_path: Path) -> None:
    model, opt = make(lr_groups=False)
    with gradoc.watch(model, opt, out=tmp_path / "run") as run:
        train(model, opt, steps=5)
        run.flush()
        with gradoc.open_run(run.dir) as live:
            assert live._conn.execute("pragma journal_mode").fetchone()[0] == "wal"
            assert live.scalar("loss").steps == [0, 1, 2, 3, 4]
            assert live.meta["status"] == "running"
        train(model, opt, steps=2)
    assert gradoc.open_run(run.dir).num_steps == 7


def test_a_broken_run_log_never_stops_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, opt = make(lr_groups=False)
    run = gradoc.watch(model, opt, out=tmp_path / "run")
    train(model, opt, steps=2)
    run._writer.put(lambda conn: conn.execute("INSERT INTO no_such_table VALUES (1)"))
    losses = train(model, opt, steps=3)  # goes on, nothing raised
    run.close()
    assert len(losses) == 3 and run.step == 5
    assert "stopped recording" in capsys.readouterr().err


READS = ("item", "cpu", "tolist", "numpy", "__bool__", "__float__", "__int__", "__index__")


class DeviceReads:
    """Counts every way the training thread reads a tensor's values to the host.

    On this CPU-only machine every tensor is a host tensor, so reads of what a read brought
    back (``.cpu()``'s result and views of it) are free and not counted; every other read is
    one an accelerator would wait for.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count, self.on, self.host, self.keep = 0, False, set[int](), list[torch.Tensor]()
        thread = threading.get_ident()
        for name in READS:
            original = getattr(torch.Tensor, name)

            def counting(t: torch.Tensor, *a: object, _o=original, _n=name, **k: object) -> object:
                if self.on and threading.get_ident() == thread and not self.brought(t):
                    self.count += 1
                out = _o(t, *a, **k)
                if _n == "cpu":
                    self.host.add(id(out))
                    self.keep.append(out)  # ids stay unique while counted
                return out

            monkeypatch.setattr(torch.Tensor, name, counting)
            if name == "item":  # gradoc's own reads, past its tap
                monkeypatch.setattr(taps, "raw_item", counting)

    def brought(self, t: torch.Tensor) -> bool:
        return id(t) in self.host or (t._base is not None and id(t._base) in self.host)

    def during(self, work: Callable[[], object]) -> int:
        self.count, self.on = 0, True
        try:
            work()
        finally:
            self.on = False
        return self.count


@pytest.mark.parametrize("where", ["cpu", "accelerator"])
@pytest.mark.parametrize(
    ("config", "vitals"),
    [
        # the default: observe and locate; on the CPU the 6 norms, read one by one (a read
        # there is no synchronisation; more than FEW norms are summed first): the loss was
        # read at its backward() (counted below), and that value is the vitals' too
        ({}, {"cpu": 12 * 6, "accelerator": 0}),
        ({"guard": True}, {"cpu": 12, "accelerator": 12}),  # decided before each update
        ({"skip_nonfinite_updates": True}, {"cpu": 12, "accelerator": 12}),
        ({"locate": False}, {"cpu": 12 * 7, "accelerator": 0}),  # nothing decided
        # statistics on steps 0 3 6 9 (gradients), 0 4 8 (activations), 0 10 (weights); the
        # loss of every step
        ({"locate": False, "grads": gradoc.every(3)}, {"cpu": 4 * 7 + 8, "accelerator": 0}),
    ],
    ids=["default", "guard", "skip-only", "nothing-decided", "sparse-grads"],
)
def test_host_reads_per_step(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    config: dict[str, object],
    vitals: dict[str, int],
    where: str,
) -> None:
    """Every read of the device the training thread makes: on the CPU (where a read is no
    synchronisation) one per step for its vitals, on an accelerator none unless the guard
    decides before each update; the statistics travel every few steps (5 here)."""
    reads = DeviceReads(monkeypatch)
    steps = 12
    monkeypatch.setattr(Transfers, "_cadence", lambda self, took: 5)
    if where == "accelerator":  # what the CPU-only test machine can say of one
        monkeypatch.setattr(Transfers, "checks_now", lambda self: self.steps.guard is not None)

    def made() -> tuple[nn.Module, torch.optim.Optimizer]:
        model, _ = make()
        # a tensor learning rate: it travels in the packet too
        return model, torch.optim.Adam(model.parameters(), lr=torch.tensor(1e-3))

    model, opt = made()
    baseline = reads.during(lambda: train(model, opt, steps=steps))  # what Adam itself reads
    model, opt = made()
    cfg: dict[str, Any] = {"activations": gradoc.every(4), **config}
    with gradoc.watch(model, opt, out=tmp_path / "run", **cfg) as run:
        watched = reads.during(lambda: train(model, opt, steps=steps))
    # transfers at the end of steps 0 (the first), 5 and 10; step 11's at the close
    # and on the CPU, with locate on, each backward()'s loss (a non-finite one's graph is
    # read before the backward frees it: locate.graph)
    # (decided before each update, the simulated accelerator's CPU tensors are read there too;
    # a real accelerator's never are: ``Locator.on_loss``)
    decided = where == "cpu" or "guard" in config or "skip_nonfinite_updates" in config
    losses = steps if decided and config.get("locate", True) else 0
    assert watched - baseline == vitals[where] + 3 + losses
    log = gradoc.open_run(run.dir)
    assert log.num_steps == steps
    assert log.lr(0).values == pytest.approx([1e-3] * steps)
    assert log.activation("fc1", "mean").steps == [0, 4, 8]
    grad_steps = [s for s in range(steps) if "grads" not in config or s % 3 == 0]
    assert log.scalar("grad_norm").steps == grad_steps
    assert len(log.param_stats_at(grad_steps[-1])) == 6


def test_one_host_read_per_step_when_the_program_clips_and_scales(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nanoGPT's loop: GradScaler, unscale_, clip_grad_norm_, the scaler's step. The
    statistics move to the first of those (before the clip scales the gradients): the
    step's vitals read once, and the statistics every few steps (5 here)."""
    reads = DeviceReads(monkeypatch)
    monkeypatch.setattr(Transfers, "_cadence", lambda self, took: 5)

    def loop(model: nn.Module, opt: torch.optim.Optimizer) -> None:
        scaler = torch.amp.GradScaler("cpu", init_scale=8.0, growth_interval=1000)
        for step in range(12):
            x, y = batch(step)
            opt.zero_grad()
            scaler.scale(F.mse_loss(model(x), y)).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            scaler.step(opt)
            scaler.update()

    model, opt = make()
    baseline = reads.during(lambda: loop(model, opt))  # the scaler's own reads
    model, opt = make()
    with gradoc.watch(model, opt, out=tmp_path / "run", activations=gradoc.every(4)) as run:
        watched = reads.during(lambda: loop(model, opt))
    # 6 norms a step (CPU reads), transfers at steps 0, 5, 10, and each backward()'s loss
    # (locate.graph), read once: the vitals take that value
    assert watched - baseline == 12 * 6 + 3 + 12
    log = gradoc.open_run(run.dir)
    assert log.scalar("clip_norm").values == pytest.approx(log.scalar("grad_norm").values)


def test_a_step_writes_nothing_to_the_tensor_class(tmp_path: Path) -> None:
    """The ``item()`` tap passes through while the optimizer steps without being taken
    off ``torch.Tensor``: a write to the class drops Python's method caches for every
    tensor (~0.1 ms of a small step)."""
    model, opt = make()
    seen: list[object] = []
    with gradoc.watch(model, opt, out=tmp_path / "run"):
        # registered after gradoc's: runs inside the step, after gradoc's pre-hook
        opt.register_step_pre_hook(lambda o, a, k: seen.append(torch.Tensor.__dict__["item"]))
        train(model, opt, steps=6)
        outside = torch.Tensor.__dict__["item"]
    assert len(seen) == 6 and len({id(s) for s in seen}) == 1
    assert seen[0] is outside and getattr(outside, "__wrapped__", None) is not None
