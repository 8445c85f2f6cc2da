"""Run directories are untrusted input (colleagues share them; disks and editors damage
them): whatever a run log holds, gradoc renders it or says in one line why not."""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import gradoc
from gradoc import cli
from gradoc.errors import UsageError
from gradoc.store.writer import create
from tests.test_cli import TRAIN, gradoc_cli

FUZZ_PLACES = 200


@pytest.fixture(scope="module")
def real_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run log with a NaN, its origin, per-layer rows and events."""
    base = tmp_path_factory.mktemp("real")
    script = base / "train.py"
    script.write_text(TRAIN)
    out = str(base / "run")
    done = gradoc_cli("run", "--replay-budget", "0", "--out", out, str(script), "--nan")
    assert done.returncode == 0, done.stderr
    return base / "run" / "run.db"


def _report(run_dir: Path) -> tuple[int, str, str]:
    """``gradoc report RUN_DIR`` in this process (fast enough for hundreds of logs)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _deadline(30):
        code = cli.main(["report", str(run_dir)])
    return code, out.getvalue(), err.getvalue()


@contextlib.contextmanager
def _deadline(seconds: int) -> Iterator[None]:
    def hang(signum: int, frame: object) -> None:
        raise AssertionError(f"gradoc report hung for {seconds} s")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _renders_or_one_line(code: int, out: str, err: str, what: str) -> None:
    assert code in (0, 1), f"{what}: exit {code}: {err}"
    assert "Traceback" not in err and "internal error" not in err, f"{what}: {err}"
    if code == 1:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("gradoc: error: "), f"{what}: {err}"
    else:
        assert "gradoc " in out, f"{what}: rendered nothing"


def test_a_run_log_damaged_at_200_random_places_renders_or_gives_one_line(
    real_log: Path, tmp_path: Path
) -> None:
    data = real_log.read_bytes()
    rng = random.Random(0)
    outcomes = {0: 0, 1: 0}
    for i in range(FUZZ_PLACES):
        damaged = bytearray(data)
        where = rng.randrange(len(data))
        if i % 4 == 0:
            damaged = damaged[:where]  # truncated
            what = f"truncated to {where} bytes"
        else:
            damaged[where] ^= 1 << rng.randrange(8)  # one bit flipped
            what = f"bit flipped at byte {where}"
        run_dir = tmp_path / f"d{i}"
        run_dir.mkdir()
        (run_dir / "run.db").write_bytes(bytes(damaged))
        code, out, err = _report(run_dir)
        _renders_or_one_line(code, out, err, what)
        outcomes[code] += 1
        shutil.rmtree(run_dir)
    assert outcomes[0] and outcomes[1]  # both outcomes met: the damage was real


def test_a_log_truncated_by_one_byte_gives_one_line(real_log: Path, tmp_path: Path) -> None:
    (tmp_path / "run.db").write_bytes(real_log.read_bytes()[:-1])
    code, out, err = _report(tmp_path)
    _renders_or_one_line(code, out, err, "truncated by one byte")


EDITS = [
    ("UPDATE meta SET value='{not json' WHERE key='status'", "not valid JSON"),
    ("UPDATE meta SET value='\"3\"' WHERE key='steps'", "meta 'steps'"),
    ("UPDATE meta SET value=7 WHERE key='guard'", "meta 'guard' is int"),
    ("UPDATE meta SET value=x'00' WHERE key='guard'", "not JSON text"),
    ("UPDATE meta SET value='{\"skipped\": \"x\"}' WHERE key='guard'", None),
    ("UPDATE layers SET name=x'00ff' WHERE id=0", "a layer name"),
    ("UPDATE layers SET kind='weird' WHERE id=0", "a layer of kind"),
    ("UPDATE layers SET shape='[1, \"a\"]' WHERE id=0", "a layer shape"),
    ("UPDATE param_arrays SET grad_norm='abc' WHERE step=3", "a statistic holds"),
    ("UPDATE param_arrays SET grad_norm=x'00ff' WHERE step=3", "a statistic holds"),
    ("UPDATE param_arrays SET grad_norm=zeroblob(8) WHERE step=3", "does not match"),
    ("UPDATE param_arrays SET grad_nonfinite=zeroblob(24) WHERE step=3", "does not match"),
    (
        "UPDATE param_arrays SET layer_ids=CAST(x'e7030000' || substr(layer_ids, 5) AS BLOB) "
        "WHERE step=3",
        "does not list",
    ),
    ("UPDATE param_arrays SET layer_ids=x'00' WHERE step=3", "a layer-id array"),
    ("UPDATE steps SET loss=x'ff00' WHERE step=2", "a statistic holds"),
    ("UPDATE steps SET lr='[\"a\"]' WHERE step=2", "a learning rate"),
    ("UPDATE events SET data='{' WHERE id=1", "not valid JSON"),
    ("UPDATE events SET data='[1]' WHERE id=1", "event"),
    ("UPDATE events SET message=CAST(x'ff' AS TEXT) WHERE id=1", None),  # not UTF-8
    ("UPDATE act_stats SET unit_active=x'000102' WHERE step=10", "unit-activity"),
    (
        "UPDATE events SET data=json_set(data, '$.origin.line', 'x') WHERE kind='nonfinite_origin'",
        None,
    ),
    ("INSERT OR REPLACE INTO meta VALUES ('optimizers', '[1, \"a\"]')", None),
    ("INSERT OR REPLACE INTO meta VALUES ('functional_activations', '\"x\"')", "meta 'func"),
    ("INSERT OR REPLACE INTO meta VALUES ('compiled', '1')", "meta 'compiled' is int"),
    (
        "UPDATE events SET data=json_set(data, '$.origin.evidence', json('[1, {\"value\": 2}]')) "
        "WHERE kind='nonfinite_origin'",
        None,
    ),
    (
        "UPDATE events SET data=json_set(data, '$.origin.source', json('{\"start\": \"x\"}')) "
        "WHERE kind='nonfinite_origin'",
        None,
    ),
    ("DELETE FROM meta", None),
    ("DROP TABLE steps", "not a readable gradoc run log"),
]


@pytest.mark.parametrize(("sql", "needle"), EDITS)
def test_a_hand_edited_log_renders_or_gives_one_line(
    real_log: Path, tmp_path: Path, sql: str, needle: str | None
) -> None:
    shutil.copy(real_log, tmp_path / "run.db")
    with contextlib.closing(sqlite3.connect(tmp_path / "run.db")) as conn:
        conn.execute(sql)
        conn.commit()
    code, out, err = _report(tmp_path)
    _renders_or_one_line(code, out, err, sql)
    if needle is not None:
        assert code == 1 and needle in err, err


def test_a_run_log_that_is_a_fifo_or_a_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "fifo").mkdir()
    os.mkfifo(tmp_path / "fifo" / "run.db")
    # in a subprocess: opening a FIFO blocks in C, where no alarm in this process reaches
    done = subprocess.run(
        [sys.executable, "-m", "gradoc", "report", str(tmp_path / "fifo")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "not a regular file" in done.stderr
    (tmp_path / "dir" / "run.db").mkdir(parents=True)
    code, _, err = _report(tmp_path / "dir")
    assert code == 1 and err.startswith("gradoc: error: ")


def test_an_empty_gradient_table_is_never_printed(real_log: Path, tmp_path: Path) -> None:
    """The finding's step had its per-layer rows thinned: show the nearest kept step."""
    shutil.copy(real_log, tmp_path / "run.db")
    with contextlib.closing(sqlite3.connect(tmp_path / "run.db")) as conn:
        conn.execute("DELETE FROM param_arrays WHERE step=7")
        conn.commit()
    code, out, err = _report(tmp_path)
    assert code == 0, err
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("largest gradients at step"))
    assert "step 7" not in lines[at] and "fc1.weight" in "\n".join(lines[at + 2 : at + 6])


# -- killed runs, read-only copies, concurrent writers --------------------------------------
KILLED = textwrap.dedent(
    """
    import os, signal, sys, torch, gradoc
    m = torch.nn.Linear(4, 1); o = torch.optim.SGD(m.parameters(), lr=0.1)
    run = gradoc.watch(m, o, out=sys.argv[1])
    for _ in range(30):
        o.zero_grad(); m(torch.randn(8, 4)).pow(2).mean().backward(); o.step()
    run.flush()
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


@contextlib.contextmanager
def _read_only_view(directory: Path) -> Iterator[Path]:
    """``directory`` where nobody can write, not even root: a read-only bind mount (as
    root), else the permission bits."""
    if os.geteuid() != 0:
        for f in directory.iterdir():
            f.chmod(0o444)
        directory.chmod(0o555)
        try:
            yield directory
        finally:
            directory.chmod(0o755)
        return
    view = directory.with_name(directory.name + "-ro")
    view.mkdir()
    mounted = subprocess.run(["mount", "--bind", str(directory), str(view)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot make a read-only mount here: {mounted.stderr.decode().strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], check=True)
        yield view
    finally:
        subprocess.run(["umount", str(view)], check=False)


def test_a_killed_run_still_in_wal_mode_reads_from_a_read_only_copy(tmp_path: Path) -> None:
    killed = subprocess.run([sys.executable, "-c", KILLED, str(tmp_path / "run")], timeout=120)
    assert killed.returncode == -signal.SIGKILL
    assert (tmp_path / "run" / "run.db-wal").exists()  # killed: the log is still in WAL mode
    (tmp_path / "run" / "run.db-shm").unlink()  # copied without it: sqlite would make one
    with _read_only_view(tmp_path / "run") as shared:  # as a colleague receives it
        with pytest.raises(OSError):
            (shared / "probe").write_text("x")
        done = gradoc_cli("report", str(shared), "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["run"]["steps"] == 30  # the WAL's steps too
        assert sorted(p.name for p in shared.iterdir()) == ["run.db", "run.db-wal"]


def test_two_writers_never_share_one_run_log(tmp_path: Path) -> None:
    create(tmp_path / "run.db").close()
    with pytest.raises(UsageError, match="already holds a run log"):
        create(tmp_path / "run.db")


RANKED = textwrap.dedent(
    """
    import sys, torch, gradoc
    m = torch.nn.Linear(4, 1); o = torch.optim.SGD(m.parameters(), lr=0.1)
    with gradoc.watch(m, o, out=sys.argv[1]):
        for _ in range(3):
            o.zero_grad(); m(torch.randn(8, 4)).pow(2).mean().backward(); o.step()
    """
)


def test_watch_on_two_torchrun_ranks_with_one_out_writes_a_log_per_rank(tmp_path: Path) -> None:
    out = tmp_path / "shared"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RANKED, str(out)],
            env={**os.environ, "RANK": str(r), "WORLD_SIZE": "2", "LOCAL_RANK": str(r)},
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    assert gradoc.open_run(out).num_steps == 3
    assert gradoc.open_run(out / "rank1").num_steps == 3


# -- the tools on scripts that do not train, or fail -----------------------------------------
NO_STEP = "import torch\nm = torch.nn.Linear(2, 1)\nprint(m(torch.randn(3, 2)).sum().item())\n"
RAISES = "import torch\nraise RuntimeError('the config file is missing')\n"


def test_amp_compare_on_a_script_without_an_optimizer_step_says_so(tmp_path: Path) -> None:
    script = tmp_path / "nostep.py"
    script.write_text(NO_STEP)
    done = gradoc_cli("amp-compare", "--steps", "2", str(script))
    assert done.returncode == 1, done.stderr
    assert "took no torch.optim optimizer step" in done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr


def test_checkpoint_plan_reports_the_scripts_own_error_as_the_scripts(tmp_path: Path) -> None:
    script = tmp_path / "raises.py"
    script.write_text(RAISES)
    done = gradoc_cli("checkpoint-plan", "--out", str(tmp_path / "plan"), str(script))
    assert done.returncode == 1
    assert "RuntimeError: the config file is missing" in done.stderr  # as python shows it
    assert done.stderr.strip().splitlines()[-1].startswith("gradoc: error: ")
    assert "raised RuntimeError" in done.stderr and "internal error" not in done.stderr
    assert 'File "' + str(script) in done.stderr and "gradoc/" not in done.stderr


def test_gradoc_replay_refuses_a_log_it_cannot_trust(real_log: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copy(real_log, run_dir / "run.db")
    with contextlib.closing(sqlite3.connect(run_dir / "run.db")) as conn:
        launch = json.loads(conn.execute("SELECT value FROM meta WHERE key='launch'").fetchone()[0])
        launch["script"] = str(tmp_path / "evil.py")  # a script the run never ran
        conn.execute("UPDATE meta SET value=? WHERE key='launch'", (json.dumps(launch),))
        conn.commit()
    (tmp_path / "evil.py").write_text("open('PWNED', 'w')\n")
    done = gradoc_cli("replay", str(run_dir), cwd=tmp_path)
    assert done.returncode == 2 and "has changed since the run" in done.stderr
    assert not (tmp_path / "PWNED").exists() and torch is not None
