"""A training restarted from its checkpoint into the same run directory: one run log, in
segments, its series continuous, the report marking where each segment began."""

from __future__ import annotations

import copy
import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

import gradoc
from gradoc.errors import UsageError
from gradoc.runtime.replay import script_digest
from gradoc.store import liveness
from tests.test_store import set_meta

TRAIN = textwrap.dedent(
    """
    import os, sys, time, torch
    mode, ckpt, total = sys.argv[1], sys.argv[2], int(sys.argv[3])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    start = 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.load_state_dict(state["model"]); opt.load_state_dict(state["opt"])
        start = state["step"]
    if mode == "watch":
        import gradoc
        run = gradoc.watch(model, opt, out=os.environ["RUN_OUT"], resume=True)
    g = torch.Generator().manual_seed(1)
    data = [torch.randn(8, 4, generator=g) for _ in range(50)]
    for step in range(start, total):
        x = data[step % 50]
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        if (step + 1) % 100 == 0:
            state = {"model": model.state_dict(), "opt": opt.state_dict(), "step": step + 1}
            torch.save(state, ckpt)
        print(step, flush=True)
        time.sleep(0.004)
    """
)


def _train(
    tmp_path: Path, mode: str, out: Path, ckpt: Path, total: int, kill_at: int | None
) -> tuple[int, str]:
    """Train to step ``total`` (from the checkpoint, if any), under ``gradoc.watch`` or
    ``gradoc run --resume``; SIGKILL once step ``kill_at`` printed. Exit status, stderr."""
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    args = [str(script), mode, str(ckpt), str(total)]
    cmd = [sys.executable, *args]
    if mode == "run":
        cmd = [sys.executable, "-m", "gradoc", "run", "--resume", "--out", str(out), *args]
    env = {**os.environ, "RUN_OUT": str(out), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    if kill_at is not None:
        for line in proc.stdout:
            if line.strip().isdigit() and int(line) >= kill_at:
                break
        proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=300)
    return proc.returncode, err


@pytest.mark.parametrize("mode", ["watch", "run"])
def test_a_run_killed_and_resumed_from_its_checkpoint_is_one_run(tmp_path: Path, mode: str) -> None:
    out, ckpt = tmp_path / "run", tmp_path / "ckpt.pt"
    code, _ = _train(tmp_path, mode, out, ckpt, 260, kill_at=180)  # checkpoint at step 100
    assert code == -signal.SIGKILL
    with gradoc.open_run(out) as log:
        assert log.status == "killed"
        killed_at = log.scalar("loss").steps[-1]
        assert killed_at >= 100  # the log went past the checkpoint (flushes every 50)
    code, err = _train(tmp_path, mode, out, ckpt, 260, kill_at=None)
    assert code == 0, err
    with gradoc.open_run(out) as log:
        assert log.status == ("finished" if mode == "run" else "exited")  # watch: at exit
        loss = log.scalar("loss")
        assert loss.steps == list(range(260))  # one series, continuous across the restart
        first, second = log.meta.segments
        assert first["start_step"] == 0
        assert second["start_step"] == 100  # Adam's state step in the checkpoint
        assert second["after"] == {
            "status": "killed",
            "last_step": killed_at,
            "redone": killed_at - 99,
        }
        resumed = [e for e in log.events if e.kind == "resumed"]
        assert [e.step for e in resumed] == [100]
        times = log.scalar("time").values
        assert all(b >= a for a, b in itertools.pairwise(times))  # training time goes on
        resumed_loss = loss.values
    # the steps trained again are the resumed segment's: the same as one uninterrupted run
    straight, straight_ckpt = tmp_path / "straight", tmp_path / "straight.pt"
    code, err = _train(tmp_path, mode, straight, straight_ckpt, 260, None)
    assert code == 0, err
    with gradoc.open_run(straight) as log:
        assert log.meta.segments == []
        assert resumed_loss == pytest.approx(log.scalar("loss").values, rel=1e-6)
    report = json.loads((out / "report.json").read_text())
    assert [s["start_step"] for s in report["run"]["segments"]] == [0, 100]
    said = subprocess.run(
        [sys.executable, "-m", "gradoc", "report", str(out)], capture_output=True, text=True
    ).stdout
    assert "resumed at step 100; the run before ended (killed)" in said
    assert f"steps 100-{killed_at} were trained again" in " ".join(said.split())


def _steps(model: torch.nn.Module, opt: torch.optim.Optimizer, n: int) -> None:
    for _ in range(n):
        opt.zero_grad()
        model(torch.randn(4, 3)).pow(2).mean().backward()
        opt.step()


def test_without_an_optimizer_step_count_the_run_goes_on_after_its_last_step(
    tmp_path: Path,
) -> None:
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)  # keeps no step count
    with gradoc.watch(model, opt, out=tmp_path / "run"):
        _steps(model, opt, 5)
    with gradoc.watch(model, opt, out=tmp_path / "run", resume=True):
        _steps(model, opt, 4)
    with gradoc.open_run(tmp_path / "run") as log:
        assert log.scalar("loss").steps == list(range(9))
        assert log.meta.segments[1]["start_step"] == 5
        assert log.meta.segments[1]["after"]["status"] == "finished"
        assert log.meta.steps == 9


def test_a_checkpoint_loaded_after_watch_sets_where_the_segment_starts(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    with gradoc.watch(model, opt, out=tmp_path / "run"):
        _steps(model, opt, 6)
        saved = copy.deepcopy({"model": model.state_dict(), "opt": opt.state_dict()})
        _steps(model, opt, 4)  # steps 6-9, lost with the job
    model2 = torch.nn.Linear(3, 1)
    opt2 = torch.optim.Adam(model2.parameters(), lr=0.01)
    with gradoc.watch(model2, opt2, out=tmp_path / "run", resume=True):
        model2.load_state_dict(saved["model"])  # after watch(): Adam's step says 6
        opt2.load_state_dict(saved["opt"])
        _steps(model2, opt2, 5)
    with gradoc.open_run(tmp_path / "run") as log:
        assert log.scalar("loss").steps == list(range(11))  # 6-10 from the second segment
        after = log.meta.segments[1]
        assert after["start_step"] == 6 and after["after"]["redone"] == 4
        assert log.meta.steps == 11


def test_a_run_directory_is_continued_only_when_asked(tmp_path: Path) -> None:
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradoc.watch(model, opt, out=tmp_path / "run"):
        _steps(model, opt, 2)
    with pytest.raises(UsageError, match=r"continue it with resume=True"):
        gradoc.watch(model, opt, out=tmp_path / "run")
    script = tmp_path / "t.py"
    script.write_text("print('hi')\n")
    done = subprocess.run(
        [sys.executable, "-m", "gradoc", "run", "--out", str(tmp_path / "run"), str(script)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "continue it with --resume" in done.stderr
    assert "hi" not in done.stdout  # refused before the script ran
    done = subprocess.run(
        [sys.executable, "-m", "gradoc", "run", "--resume", str(script)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "--resume continues the run in a directory" in done.stderr


def test_resume_starts_a_new_run_where_there_is_none(tmp_path: Path) -> None:
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradoc.watch(model, opt, out=tmp_path / "run", resume=True):
        _steps(model, opt, 3)
    with gradoc.open_run(tmp_path / "run") as log:
        assert log.scalar("loss").steps == [0, 1, 2] and log.meta.segments == []


def test_a_log_still_being_written_is_not_resumed(tmp_path: Path) -> None:
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradoc.watch(model, opt, out=tmp_path / "run"):
        _steps(model, opt, 2)
    set_meta(tmp_path / "run", status="running", process=liveness.identity())  # as if alive
    with pytest.raises(UsageError, match=r"still being written by pid \d+"):
        gradoc.watch(model, opt, out=tmp_path / "run", resume=True)


def test_a_log_written_on_another_host_is_resumed_once_its_writer_is_silent(
    tmp_path: Path,
) -> None:
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradoc.watch(model, opt, out=tmp_path / "run"):
        _steps(model, opt, 2)
    elsewhere = {"pid": 1, "started": 0.0, "host": "not-" + liveness.identity()["host"]}
    # the job ran on another node, heard from just now
    set_meta(tmp_path / "run", status="running", process=elsewhere, heartbeat=time.time())
    with pytest.raises(UsageError, match=r"still being written by pid 1 on not-"):
        gradoc.watch(model, opt, out=tmp_path / "run", resume=True)
    set_meta(tmp_path / "run", heartbeat=time.time() - 600)  # which went silent 10 min ago
    with gradoc.watch(model, opt, out=tmp_path / "run", resume=True):
        _steps(model, opt, 2)
    with gradoc.open_run(tmp_path / "run") as log:
        assert log.scalar("loss").steps == [0, 1, 2, 3]
        assert log.meta.segments[1]["after"]["status"] == "killed"


def test_a_segment_resumed_past_the_dense_steps_times_its_own_steps_for_the_cadence(
    tmp_path: Path,
) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    with gradoc.watch(model, opt, out=tmp_path / "run"):
        _steps(model, opt, 3)
    for state in opt.state.values():  # a checkpoint of step 300: past the dense sampling
        state["step"].fill_(300.0)
    with gradoc.watch(model, opt, out=tmp_path / "run", resume=True):
        _steps(model, opt, 60)
    with gradoc.open_run(tmp_path / "run") as log:
        assert log.meta.segments[1]["start_step"] == 300
        sampling = log.meta.sampling
        assert sampling is not None and sampling["chosen_at"] == 350  # 50 steps timed
        # chosen from both kinds of step, each timed in this segment
        assert sampling["step_ms"] is not None and sampling["sampled_step_ms"] is not None
        assert sampling["every"] >= 10


def test_a_resumed_run_is_not_replayed_from_a_start_it_no_longer_has(tmp_path: Path) -> None:
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradoc.watch(model, opt, out=tmp_path / "run"):
        _steps(model, opt, 2)
    with gradoc.watch(model, opt, out=tmp_path / "run", resume=True):
        _steps(model, opt, 2)
    script = tmp_path / "train.py"
    script.write_text("print('trained')\n")
    launch = {
        "script": str(script),
        "args": [],
        "cwd": str(tmp_path),
        "sha256": script_digest(script),
    }
    set_meta(  # as gradoc run leaves a script that stopped with a NaN in hand
        tmp_path / "run",
        launch=launch,
        exit_clues=["`loss` was nan at train.py:9"],
        exit_code=1,
        ended_mid_step=True,
    )
    done = subprocess.run(
        [sys.executable, "-m", "gradoc", "replay", str(tmp_path / "run")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2, done.stderr
    assert "the run was resumed (at step 2)" in done.stderr and "trained" not in done.stdout
