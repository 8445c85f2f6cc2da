"""The sampled statistics' cadence, chosen once per run from its measured step time
(``collect.cadence``), fixed once chosen, recorded, and overridable by hand."""

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
from gradoc.collect import cadence as cadence_module
from gradoc.collect.cadence import Cadence
from gradoc.schedule import budget


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

    from gradoc.collect.packet import Packet

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
