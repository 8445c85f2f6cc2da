"""The sampled statistics' cadence, chosen once per run from its measured step time
(``collect.step.cadence``), fixed once chosen, recorded, and overridable by hand."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn

import gradoc
from gradoc.collect.step import cadence as cadence_module
from gradoc.collect.step.cadence import Cadence
from gradoc.schedule import budget, lean


class _Run:
    def __init__(self) -> None:
        self.meta: dict[str, Any] = {}

    def set_meta(self, **items: Any) -> None:
        self.meta |= items


def _timed(monkeypatch: pytest.MonkeyPatch, plain_ms: float, sampled_ms: float) -> Cadence:
    """A cadence fed steps 0..49 that took ``plain_ms`` (``sampled_ms`` every 10th)."""
    clock = [0.0]
    monkeypatch.setattr(cadence_module.time, "perf_counter", lambda: clock[0])
    c = Cadence(_Run(), budget())  # type: ignore[arg-type]
    for step in range(50):
        clock[0] += (sampled_ms if step % 10 == 0 else plain_ms) / 1e3
        c.end_step(step, False)
    return c


def test_the_cadence_keeps_the_sampled_steps_within_the_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a sampled step costs 1 ms more than a 1 ms step: 1 / (0.03 * 1) = 33 steps -> 50
    c = _timed(monkeypatch, 1.0, 2.0)
    assert c.k == 50
    sampling = c.run.meta["sampling"]  # type: ignore[attr-defined]
    assert (sampling["every"], sampling["from"], sampling["step_ms"]) == (50, 200, 1.0)
    assert [s for s in range(400) if c.sampled(s)] == [*range(0, 200, 10), 200, 250, 300, 350]


def test_a_cheap_sample_keeps_the_dense_cadence_and_a_dear_one_is_capped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _timed(monkeypatch, 100.0, 101.0).k == 10  # 1% of a big step: every 10
    assert _timed(monkeypatch, 0.1, 50.0).k == 1000  # never sparser than 1 in 1,000


def test_the_cadence_is_fixed_once_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    c = _timed(monkeypatch, 1.0, 2.0)
    clock = [1.0]
    monkeypatch.setattr(cadence_module.time, "perf_counter", lambda: clock[0])
    for step in range(50, 500):  # later steps 100x slower: nothing changes
        clock[0] += 0.1
        c.end_step(step, False)
    assert c.k == 50
    assert c.run.meta["sampling"]["every"] == 50  # type: ignore[attr-defined]


def _train(steps: int) -> tuple[nn.Module, torch.optim.Optimizer, Any]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def loop() -> None:
        x, y = torch.randn(32, 8), torch.randn(32, 1)
        for _ in range(steps):
            loss = ((model(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

    return model, opt, loop


def _activation_steps(out: Path) -> list[int]:
    db = sqlite3.connect(out / "run.db")
    return [s for (s,) in db.execute("select distinct step from act_stats order by step")]


def test_a_watched_run_samples_by_its_chosen_cadence_and_records_it(tmp_path: Path) -> None:
    model, opt, loop = _train(420)
    config = gradoc.WatchConfig()
    with gradoc.watch(model, opt, out=tmp_path / "run", config=config):
        loop()
    assert isinstance(config.params, budget)  # the program's own config is left as given
    with gradoc.open_run(tmp_path / "run") as log:
        k = log.meta.sampling["every"]
        report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert k in cadence_module.ROUND
    assert _activation_steps(tmp_path / "run") == [*range(0, 200, 10), *range(200, 420, k)]
    assert f"then every {k}" in report["run"]["sampling"]


def test_a_cadence_given_by_hand_is_kept(tmp_path: Path) -> None:
    model, opt, loop = _train(260)
    with gradoc.watch(model, opt, out=tmp_path / "run", params=10, activations=10):
        loop()
    with gradoc.open_run(tmp_path / "run") as log:
        assert log.meta.sampling is None
        assert log.meta.config["params"] == "every(n=10)"
    assert _activation_steps(tmp_path / "run") == list(range(0, 260, 10))


def test_gradoc_run_sample_every_fixes_the_cadence(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))\n"
        "o = torch.optim.SGD(m.parameters(), lr=0.01)\n"
        "for _ in range(30):\n"
        "    loss = m(torch.randn(16, 4)).pow(2).mean()\n"
        "    o.zero_grad(); loss.backward(); o.step()\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "gradoc", "run", "--sample-every", "5", "--out", "run", "train.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert _activation_steps(tmp_path / "run") == list(range(0, 30, 5))
    assert (
        "every(n=5)"
        in json.loads((tmp_path / "run" / "report.json").read_text())["run"]["sampling"]
    )
    bad = subprocess.run(
        [sys.executable, "-m", "gradoc", "run", "--sample-every", "0", "train.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert bad.returncode == 2 and "must be 1 or more" in bad.stderr


def test_statistics_travel_every_flush_every_steps_where_each_step_is_read_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the CPU each step's vitals are read at its statistics point, so nothing waits for
    a transfer: the statistics travel every ``flush_every_steps`` steps, not every few (a
    slow step once made that every step), and every step still reaches the log."""
    import time

    from gradoc.collect.step.packet import Packet

    reads = [0]
    read = Packet.read

    def counted(self: Packet) -> torch.Tensor:
        reads[0] += 1
        return read(self)

    monkeypatch.setattr(Packet, "read", counted)
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 4)
    with gradoc.watch(
        model, opt, out=tmp_path / "run", flush_every_steps=20, flush_every_s=3600.0
    ) as run:
        for _ in range(60):
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            time.sleep(0.005)  # a slow step: a transfer is a small share of it
            opt.step()
    # the first step's transfer, then steps 20 and 40, and the close's
    assert reads[0] <= 5, reads[0]
    log = gradoc.open_run(run.dir)
    assert log.num_steps == 60
    assert len(log.scalar("loss").values) == 60 and len(log.scalar("grad_norm").values) == 60


def _timed_reads(monkeypatch: pytest.MonkeyPatch, plain_ms: float, reads_ms: float) -> Cadence:
    """A cadence on the per-step reads' budget fed 50 steps of ``plain_ms`` whose reads took
    ``reads_ms``."""
    clock = [0.0]
    monkeypatch.setattr(cadence_module.time, "perf_counter", lambda: clock[0])
    c = Cadence(_Run(), budget())  # type: ignore[arg-type]
    c.lean = lean()
    for step in range(50):
        clock[0] += (plain_ms - reads_ms / 2) / 1e3
        c.collected(reads_ms / 2e3, sampled=step % 10 == 0)  # the norms' reduction
        c.at_statistics(None, True)  # type: ignore[arg-type]  # the probes' point, then
        clock[0] += reads_ms / 2e3
        c.decided(None, None)  # type: ignore[arg-type]  # their host read, with the loss
        c.end_step(step, False)
    return c


def test_reads_that_do_not_fit_a_short_step_are_read_every_few_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reads may take a quarter of the larger of 3% of the step and 0.1 ms: 0.064 ms on a
    1.15 ms step is 2.6x that (0.025 ms), so every 5th step (the 100-tensor model's)."""
    c = _timed_reads(monkeypatch, 1.15, 0.064)
    assert c.kg == 5
    sampling = c.run.meta["sampling"]  # type: ignore[attr-defined]
    assert (sampling["grads_every"], sampling["reads_ms"], sampling["reads_budget_ms"]) == (
        5,
        0.064,
        0.025,
    )
    read = [s for s in range(190, 260) if c.read(s)]
    sampled = [s for s in range(200, 260) if c.sampled(s)]
    assert read == sorted({*range(190, 200), *range(200, 260, 5), *sampled})


@pytest.mark.parametrize(
    ("plain_ms", "reads_ms", "kg"),
    [(0.25, 0.02, 1), (100.0, 0.5, 1), (100.0, 2.0, 5), (0.2, 30.0, 1000)],
)
def test_reads_that_fit_are_read_every_step(
    monkeypatch: pytest.MonkeyPatch, plain_ms: float, reads_ms: float, kg: int
) -> None:
    """0.02 ms fits a 0.25 ms step (the floor: a quarter of 0.1 ms); 0.5 ms fits a 100 ms
    step (a quarter of 3 ms), 2 ms does not; never sparser than 1 in 1,000."""
    c = _timed_reads(monkeypatch, plain_ms, reads_ms)
    assert c.kg == kg
    assert all(c.read(s) for s in range(0, 200))


class _NanGrad(torch.autograd.Function):
    """The identity, whose backward makes every gradient NaN (a finite loss)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g * float("nan")


class _Net(nn.Module):
    def __init__(self, bad_at: int, how: str) -> None:
        super().__init__()
        self.a, self.b, self.bad_at, self.how = nn.Linear(8, 16), nn.Linear(16, 1), bad_at, how

    def forward(self, x: torch.Tensor, step: int) -> torch.Tensor:
        h = self.a(x)
        if step == self.bad_at:
            h = _NanGrad.apply(h) if self.how == "grad" else h / 0.0  # division on this line
        return self.b(torch.relu(h))


NEVER_FITS = gradoc.lean(share=1e-6, floor_ms=0)


def _lean_run(
    tmp_path: Path,
    how: str,
    steps: int = 420,
    bad_at: int = 333,
    grads: gradoc.lean = NEVER_FITS,
    adam: bool = False,
) -> dict[str, Any]:
    """A run whose per-step reads never fit (a budget of 0: every 1,000th step from 200).
    ``how="lr"``: the learning rate turns NaN at ``bad_at`` (finite gradients, a NaN update)."""
    torch.manual_seed(0)
    model = _Net(bad_at, how)
    params = model.parameters()
    opt = torch.optim.Adam(params, lr=1e-3) if adam else torch.optim.SGD(params, lr=0.01)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    with gradoc.watch(model, opt, out=tmp_path / "run", grads=grads):
        for step in range(steps):
            if how == "lr" and step == bad_at:
                opt.param_groups[0]["lr"] = float("nan")
            loss = ((model(x, step) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    report: dict[str, Any] = json.loads((tmp_path / "run" / "report.json").read_text())
    return report


def test_a_lean_cadence_asked_for_is_kept_whatever_the_reads_cost(tmp_path: Path) -> None:
    """``lean(every=7)``: the same schedule with k fixed (these reads fit their budget, so
    the timing alone would read every step), and the report says it was asked for."""
    report = _lean_run(tmp_path, "none", steps=260, grads=gradoc.lean(every=7))
    with gradoc.open_run(tmp_path / "run") as log:
        kg, k = log.meta.sampling["grads_every"], log.meta.sampling["every"]
        grads = log.scalar("grad_norm").steps
    assert kg == 7
    read = [s for s in range(200, 260) if s % 7 == 0 or s % k == 0]
    assert grads == [*range(200), *read]
    assert "then every 7 (as asked); the loss every step" in report["run"]["sampling"]
    with pytest.raises(ValueError, match="every"):
        gradoc.lean(every=0)


def test_a_lean_run_reads_the_loss_every_step_and_the_gradients_every_kg(tmp_path: Path) -> None:
    report = _lean_run(tmp_path, "none")
    with gradoc.open_run(tmp_path / "run") as log:
        kg, k = log.meta.sampling["grads_every"], log.meta.sampling["every"]
        grads, loss = log.scalar("grad_norm").steps, log.scalar("loss").steps
    assert kg == 1000
    assert loss == list(range(420))
    assert grads == [*range(200), *range(200, 420, k)]  # the sampled steps keep theirs
    assert "gradient norms every step to step 200, then every 1000" in report["run"]["sampling"]
    assert "the loss every step" in report["run"]["sampling"]


def test_a_nan_loss_on_a_lean_step_is_seen_and_located_at_its_step(tmp_path: Path) -> None:
    (top,) = [f for f in _lean_run(tmp_path, "loss")["findings"] if f["kind"] == "nonfinite"]
    origin = top["origin"]
    assert (top["step"], origin["step"], origin["phase"]) == (333, 333, "forward"), origin
    assert origin["op"] == "aten.div.Tensor" and not origin["late"]


def test_a_nan_gradient_on_a_lean_step_is_found_in_its_backward_a_step_late(
    tmp_path: Path,
) -> None:
    """Its gradients were not read; when the next step's loss (computed on the weights its
    update wrote) comes back non-finite, the weights the update wrote (plain SGD keeps no
    moment) are counted: the birth is the backward of the step before, not the update that
    carried it."""
    (top,) = [f for f in _lean_run(tmp_path, "grad")["findings"] if f["kind"] == "nonfinite"]
    origin = top["origin"]
    assert (top["step"], origin["step"], origin["phase"], origin["late"]) == (
        333,
        333,
        "backward",
        True,
    ), origin
    assert "born in the backward pass of step 333" in top["summary"], top["summary"]
    assert "optimizer" not in top["summary"].split(";")[0]


def test_a_nan_gradient_on_a_lean_step_is_found_in_the_moments_it_left(tmp_path: Path) -> None:
    """Nothing is held from a lean step: with Adam, the NaN gradient of step 333 is found a
    step late in the first moments its update left, the parameters named."""
    report = _lean_run(tmp_path, "grad", adam=True)
    (top,) = [f for f in report["findings"] if f["kind"] == "nonfinite"]
    origin = top["origin"]
    assert (origin["step"], origin["phase"], origin["late"]) == (333, "backward", True), origin
    named = [e for e in origin["evidence"] if "gradients held non-finite" in e["signal"]]
    assert named and {"a.weight", "a.bias"} <= set(named[0]["names"]), origin


def test_a_nan_update_from_finite_gradients_is_not_said_born_in_the_backward(
    tmp_path: Path,
) -> None:
    """A learning rate turned NaN on a lean step writes NaN weights from finite gradients:
    Adam's first moments stay finite, so the step's backward is not blamed."""
    report = _lean_run(tmp_path, "lr", adam=True)
    origins = [f["origin"] for f in report["findings"] if f.get("origin")]
    assert not [o for o in origins if o["phase"] == "backward" and o["step"] == 333], origins


def test_gradients_asked_for_every_step_are_read_every_step(tmp_path: Path) -> None:
    model, opt, loop = _train(260)
    with gradoc.watch(model, opt, out=tmp_path / "run", grads=1):
        loop()
    with gradoc.open_run(tmp_path / "run") as log:
        assert "grads_every" not in log.meta.sampling
        assert log.scalar("grad_norm").steps == list(range(260))


class _Amplified(nn.Module):
    """From step ``at`` on, every gradient reaching the first layer is 10^4 times larger
    (the loss, and with a tiny learning rate the weights, unchanged)."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.a, self.b, self.at = nn.Linear(8, 16), nn.Linear(16, 1), at

    def forward(self, x: torch.Tensor, step: int) -> torch.Tensor:
        h = self.a(x)
        if step >= self.at:
            h.register_hook(lambda g: g * 1e4)
        return self.b(torch.relu(h))


@pytest.mark.parametrize(("grads", "step_from"), [(gradoc.lean(every=10), 301), (1, None)])
def test_a_gradient_finding_on_a_lean_stretch_is_dated_to_the_cadence(
    tmp_path: Path, grads: Any, step_from: int | None
) -> None:
    """Gradients that explode from step 305, read every 10th step: the finding is made at
    the read of step 310 and may have begun after the read of step 300 (``step_from``); read
    every step, it is made at 305 and is exact."""
    torch.manual_seed(0)
    model = _Amplified(305)
    opt = torch.optim.SGD(model.parameters(), lr=1e-12)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    with gradoc.watch(model, opt, out=tmp_path / "run", grads=grads):
        for step in range(420):
            loss = ((model(x, step) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    (found,) = [f for f in report["findings"] if f["kind"] == "exploding_gradients"]
    assert found["step"] == (310 if step_from else 305), found
    assert found.get("step_from") == step_from
    if step_from:
        assert "it began between step 301 and step 310" in found["summary"]
