"""Every way a run ends, told true: SIGTERM (with and without the program's own handler),
SIGKILL, Ctrl-C, each against the same program without gradoc; a log whose process is
gone says so, and a reused pid is not taken for its writer."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import FrameType

import pytest

import gradoc
from gradoc.collect import termination
from gradoc.store import liveness
from tests.test_store import _small_run, set_meta

TRAIN = textwrap.dedent(
    """
    import os, signal, sys, time, torch
    mode, handler = sys.argv[1], sys.argv[2] == "handler"
    stop = []
    if handler:  # the program's own: finish the step, say so, exit 3
        signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if mode == "watch":
        import gradoc
        run = gradoc.watch(model, opt, out=os.environ["RUN_OUT"])
    for step in range(100_000):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        print(step, flush=True)
        time.sleep(0.01)
        if stop:
            print("stopping at the program's own handler", flush=True)
            sys.exit(3)
    """
)


def _ended(
    tmp_path: Path,
    mode: str,
    sig: int,
    handler: bool = False,
    after: int = 40,
    fault: str | None = None,
) -> tuple[int, int, str, Path]:
    """Run the training script (``plain``: without gradoc; ``watch``: gradoc.watch in it;
    ``run``: under ``gradoc run``), send ``sig`` once it printed step ``after``; its exit
    status, the last step it printed, what it printed after, and its run directory."""
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    out = tmp_path / f"run-{mode}"
    args = [str(script), "watch" if mode == "watch" else "plain", "handler" if handler else "-"]
    cmd = [sys.executable, *args]
    if mode == "run":
        cmd = [sys.executable, "-m", "gradoc", "run", "--out", str(out), *args]
    env = {**os.environ, "RUN_OUT": str(out), "OMP_NUM_THREADS": "1"}
    if fault is not None:  # an entry of gradoc's made to fail (``_util.entry``)
        env["GRADOC_FAULT"] = fault
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    last = -1
    for line in proc.stdout:
        last = int(line)
        if last >= after:
            break
    proc.send_signal(sig)
    rest, err = proc.communicate(timeout=120)
    printed = [int(x) for x in rest.split() if x.isdigit()]
    return proc.returncode, max([last, *printed]), rest + err, out


def _report(out: Path, *more: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "gradoc", "report", str(out), *more],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("mode", ["watch", "run"])
def test_sigterm_closes_the_run_then_the_process_dies_of_it(tmp_path: Path, mode: str) -> None:
    plain, *_ = _ended(tmp_path, "plain", signal.SIGTERM)
    code, last, printed, out = _ended(tmp_path, mode, signal.SIGTERM)
    assert plain == code == -signal.SIGTERM  # a shell shows 143 for both
    assert "gradoc: terminated (SIGTERM)" in printed
    with gradoc.open_run(out) as log:
        assert log.meta.status == log.status == "terminated"
        assert log.meta.exit_code == -signal.SIGTERM
        # nothing lost: every step the program finished is in the log
        assert log.scalar("loss").steps == list(range(log.num_steps))
        assert log.num_steps >= last + 1
    report = json.loads((out / "report.json").read_text())
    assert report["run"]["status"] == "terminated"
    assert (out / "report.html").exists()
    assert "script terminated" in _report(out)


@pytest.mark.parametrize("mode", ["watch", "run"])
def test_a_sigterm_handler_of_gradocs_that_fails_still_ends_the_process_by_the_signal(
    tmp_path: Path, mode: str
) -> None:
    """gradoc's handler failing is said, and the default action it stood for happens."""
    where = "collect.termination._on_sigterm"
    code, _, printed, _ = _ended(tmp_path, mode, signal.SIGTERM, fault=where)
    assert code == -signal.SIGTERM
    assert f"internal error in {where}" in printed and "Traceback" not in printed


@pytest.mark.parametrize("mode", ["watch", "run"])
def test_the_programs_own_sigterm_handler_runs_as_without_gradoc(tmp_path: Path, mode: str) -> None:
    plain, _, plain_printed, _ = _ended(tmp_path, "plain", signal.SIGTERM, handler=True)
    code, last, printed, out = _ended(tmp_path, mode, signal.SIGTERM, handler=True)
    assert plain == code == 3
    assert "stopping at the program's own handler" in plain_printed
    assert "stopping at the program's own handler" in printed
    assert "gradoc: terminated" not in printed  # the program ended itself, its way
    with gradoc.open_run(out) as log:
        assert log.num_steps == last + 1  # the step after the signal too: the program's
        if mode == "watch":  # the handler was there before the run: gradoc saw the signal
            assert log.status == "terminated"
            kinds = {e.kind for e in log.events}
            assert "terminated" in kinds
        else:  # the script set its handler after gradoc run's: gradoc never heard of it
            assert log.status == "failed" and log.meta.exit_code == 3
    said = _report(out)
    assert f"script {'terminated' if mode == 'watch' else 'failed'}" in said


@pytest.mark.parametrize("mode", ["watch", "run"])
def test_ctrl_c_ends_the_process_as_python_does(tmp_path: Path, mode: str) -> None:
    plain, *_ = _ended(tmp_path, "plain", signal.SIGINT)
    code, last, printed, out = _ended(tmp_path, mode, signal.SIGINT)
    assert plain == code == -signal.SIGINT
    assert "KeyboardInterrupt" in printed
    with gradoc.open_run(out) as log:
        assert log.status == "interrupted"
        assert log.num_steps >= last + 1
    assert "script interrupted" in _report(out)


@pytest.mark.parametrize("mode", ["watch", "run"])
def test_kill_9_keeps_the_steps_up_to_the_last_second_and_says_the_process_is_gone(
    tmp_path: Path, mode: str
) -> None:
    plain, *_ = _ended(tmp_path, "plain", signal.SIGKILL, after=150)
    code, last, _, out = _ended(tmp_path, mode, signal.SIGKILL, after=150)
    assert plain == code == -signal.SIGKILL
    with gradoc.open_run(out) as log:
        assert log.meta.status == "running"  # it never closed
        assert log.status == "killed"
        ending = log.ending
        assert ending is not None and "ended without closing at step" in ending.sentence
        steps = log.scalar("loss").steps
        assert steps == list(range(len(steps)))
        # 10 ms steps: at most one second (flush_every_s) lost, and what the writer held
        assert len(steps) >= last + 1 - 100 - 20, (len(steps), last)
    said = _report(out, "--html", str(tmp_path / "page.html"))
    assert "script killed" in said and "the process" in said and "is gone" in said
    assert "running" not in said.split("\n")[0]
    page = (tmp_path / "page.html").read_text()
    assert "script status: killed" in page and "ended without closing at step" in page


def _log(
    tmp_path: Path,
    process: dict[str, object],
    status: str = "running",
    heartbeat: float | None = None,
) -> Path:
    """A small run's log whose meta says it is ``status`` and written by ``process`` (last
    heard from at ``heartbeat``; None: as the run wrote it)."""
    run_dir = _small_run(tmp_path)
    beat = {} if heartbeat is None else {"heartbeat": heartbeat}
    set_meta(run_dir, status=status, process=process, **beat)
    return run_dir


def test_a_reused_pid_is_not_taken_for_the_runs_writer(tmp_path: Path) -> None:
    me = liveness.identity()  # a live process: this one
    assert isinstance(me["started"], float)
    reused = {**me, "started": me["started"] - 3600.0}  # the writer started an hour earlier
    with gradoc.open_run(_log(tmp_path / "a", reused)) as log:
        assert log.status == "killed"
        assert f"pid {me['pid']}, is gone" in log.ending.sentence  # type: ignore[union-attr]
    with gradoc.open_run(_log(tmp_path / "b", me)) as log:
        assert log.status == "running"
        assert "still running" in log.ending.sentence  # type: ignore[union-attr]


def test_a_writer_on_another_host_is_not_judged_from_here(tmp_path: Path) -> None:
    elsewhere = {"pid": 1, "started": 0.0, "host": "not-" + liveness.identity()["host"]}
    with gradoc.open_run(_log(tmp_path, elsewhere)) as log:
        assert log.status == "running"
        sentence = log.ending.sentence  # type: ignore[union-attr]
        assert "not checkable from this host" in sentence and "last heard from" in sentence


def test_a_writer_on_another_host_silent_for_minutes_is_taken_as_gone(tmp_path: Path) -> None:
    elsewhere = {"pid": 1, "started": 0.0, "host": "not-" + liveness.identity()["host"]}
    with gradoc.open_run(_log(tmp_path, elsewhere, heartbeat=time.time() - 600)) as log:
        assert log.status == "killed"
        assert "has not written for 600 s" in log.ending.sentence  # type: ignore[union-attr]


def test_a_closed_run_has_no_ending_to_tell(tmp_path: Path) -> None:
    gone = {"pid": 2**22 + 12345, "started": 0.0, "host": liveness.identity()["host"]}
    with gradoc.open_run(_log(tmp_path, gone, status="finished")) as log:
        assert log.ending is None and log.status == "finished"


def test_the_writer_beats_while_training_pauses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gradoc.store import writer

    monkeypatch.setattr(writer, "HEARTBEAT_S", 0.05)
    log = writer.RunWriter(tmp_path / "run.db", flush_every_s=0.05)
    try:
        first = _heartbeat(tmp_path)
        time.sleep(0.5)  # nothing written meanwhile
        later = _heartbeat(tmp_path)
        assert later is not None and time.time() - later < 0.5
        assert first is None or later > first
    finally:
        log.close()


def _heartbeat(tmp_path: Path) -> float | None:
    db = sqlite3.connect(tmp_path / "run.db")
    try:
        rows = db.execute("SELECT value FROM meta WHERE key = 'heartbeat'").fetchall()
    finally:
        db.close()
    return float(json.loads(rows[0][0])) if rows else None


def test_a_handler_chaining_to_gradocs_does_not_end_the_program() -> None:
    """A handler set after gradoc's that calls the one it replaced: without gradoc that was
    the default action, which Python cannot call; gradoc's does nothing then."""
    closed: list[object] = []
    previous = signal.getsignal(signal.SIGTERM)
    termination.arm(lambda *args: closed.append(args))
    try:
        ours = signal.getsignal(signal.SIGTERM)
        assert callable(ours)
        came: list[int] = []

        def chaining(signum: int, frame: FrameType | None) -> None:
            came.append(signum)
            ours(signum, frame)

        signal.signal(signal.SIGTERM, chaining)
        signal.raise_signal(signal.SIGTERM)
        assert came == [signal.SIGTERM] and closed == []  # still alive, nothing closed
    finally:
        termination.disarm()
        signal.signal(signal.SIGTERM, previous)
    assert signal.getsignal(signal.SIGTERM) is previous


CLOSED_BY_SIGTERM = textwrap.dedent(
    """
    import os, signal, torch, gradoc
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    run = gradoc.watch(model, opt, out=os.environ["RUN_OUT"])
    for _ in range(5):
        opt.zero_grad(); model(torch.randn(4, 3)).pow(2).mean().backward(); opt.step()
    close = run._writer.close
    def terminated_while_closing():
        os.kill(os.getpid(), signal.SIGTERM)  # the scheduler's signal, in the middle of it
        close()
    run._writer.close = terminated_while_closing
    run.close()
    print("after close", flush=True)
    """
)


def test_a_sigterm_during_the_close_lets_it_finish_then_ends_the_process(tmp_path: Path) -> None:
    script = tmp_path / "closing.py"
    script.write_text(CLOSED_BY_SIGTERM)
    out = tmp_path / "run"
    env = {**os.environ, "RUN_OUT": str(out), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == -signal.SIGTERM, done.stderr  # as without gradoc: it died of it
    assert "after close" not in done.stdout
    report = json.loads((out / "report.json").read_text())  # the close finished first
    assert report["run"]["status"] == "finished" and report["run"]["steps"] == 5
