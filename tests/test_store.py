"""The run log on disk: crash safety, readability, clear errors."""

from __future__ import annotations

import json
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import gradoc
from gradoc.errors import RunLogError

TRAIN_FOREVER = textwrap.dedent(
    """
    import sys, time, torch, torch.nn as nn
    import gradoc
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    run = gradoc.watch(model, opt, out=sys.argv[1], flush_every_steps=10, flush_every_s=0.2)
    step = 0
    while True:
        x = torch.randn(16, 8)
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        print(step, flush=True)
        step += 1
        time.sleep(0.005)
    """
)


def test_kill_9_leaves_a_readable_log_up_to_the_last_flush(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(TRAIN_FOREVER)
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(out)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    last = -1
    for line in proc.stdout:
        last = int(line)
        if last >= 150:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    with gradoc.open_run(out) as log:
        steps = log.scalar("loss").steps
        assert steps == list(range(len(steps)))  # every step up to the last flush, no gaps
        # at most flush_every_steps (10) behind, plus what the writer had in hand
        assert len(steps) >= last + 1 - 25, (len(steps), last)
        assert len(log.param("0.weight", "grad_norm")) == len(steps)
        assert log.meta["status"] == "running"  # it never closed
    # and the report of the killed run can still be produced
    done = subprocess.run(
        [sys.executable, "-m", "gradoc", "report", str(out)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "steps" in done.stdout


def _small_run(tmp_path: Path) -> Path:
    import torch

    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradoc.watch(model, opt, out=tmp_path / "run") as run:
        for _ in range(3):
            opt.zero_grad()
            model(torch.randn(4, 3)).pow(2).mean().backward()
            opt.step()
    return run.dir


def set_meta(run_dir: Path, **items: object) -> None:
    """Write ``items`` into a closed run log's ``meta`` (JSON values), as a log that another
    process wrote, or that ended otherwise, would hold them."""
    db = sqlite3.connect(run_dir / "run.db")
    with db:
        for key, value in items.items():
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))
    db.close()


@pytest.mark.skipif(shutil.which("sqlite3") is None, reason="the sqlite3 tool is not installed")
def test_the_writer_drains_a_full_queue_while_the_training_thread_holds_the_stage(
    tmp_path: Path,
) -> None:
    """The training thread hands records over under the stage lock and may block there on a
    full queue; the writer, idle a moment before, must not wait for that lock (a deadlock:
    seen as a demo that never finished)."""
    from gradoc.store.writer import RunWriter

    writer = RunWriter(tmp_path / "run.db", queue_size=1, flush_every_steps=2, flush_every_s=0.05)
    applied: list[int] = []
    with writer._stage_lock:  # what the training thread holds while it hands a batch over
        time.sleep(writer._stage_s * 4)  # the writer's poll timed out: it is idle now
        for i in (1, 2):  # a queue of one: the second waits for the writer to take the first
            writer._queue.put([lambda conn, i=i: applied.append(i)], timeout=2)
    writer.close()
    assert applied == [1, 2]


def test_readable_with_the_sqlite3_tool(tmp_path: Path) -> None:
    db = _small_run(tmp_path) / "run.db"
    out = subprocess.run(
        ["sqlite3", str(db), "select step, n_backward from steps order by step"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.split() == ["0|1", "1|1", "2|1"]


def test_schema_is_versioned(tmp_path: Path) -> None:
    db = _small_run(tmp_path) / "run.db"
    conn = sqlite3.connect(db)
    assert conn.execute("pragma user_version").fetchone()[0] == gradoc.store.SCHEMA_VERSION
    # a finished run is one self-contained file (WAL is for the run while it is written)
    assert conn.execute("pragma journal_mode").fetchone()[0] == "delete"
    assert sorted(p.name for p in db.parent.iterdir()) == ["report.html", "report.json", "run.db"]
    conn.execute("pragma user_version=99")
    conn.commit()
    conn.close()
    with pytest.raises(RunLogError, match="schema version 99"):
        gradoc.open_run(db.parent)


def test_corrupted_or_missing_log_gives_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "run.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(RunLogError, match="not a readable gradoc run log"):
        gradoc.open_run(bad)
    with pytest.raises(RunLogError, match="no run log"):
        gradoc.open_run(tmp_path / "nowhere")


def test_reader_series_and_errors(tmp_path: Path) -> None:
    log = gradoc.open_run(_small_run(tmp_path))
    assert log.scalar("loss").steps == [0, 1, 2]
    assert log.param("weight", "grad_norm").at(5) is None
    with pytest.raises(KeyError, match="no watched param"):
        log.param("nope", "grad_norm")
    with pytest.raises(KeyError, match="unknown statistic"):
        log.param("weight", "colour")


def test_the_meta_table_reads_typed_and_as_the_table_it_is(tmp_path: Path) -> None:
    run_dir = _small_run(tmp_path)
    with sqlite3.connect(run_dir / "run.db") as conn:  # a key of a later gradoc's
        conn.execute("INSERT INTO meta VALUES ('future_key', '{\"x\": 1}')")
    meta = gradoc.open_run(run_dir).meta
    assert (meta.status, meta.steps, meta.exit_code) == ("finished", 3, None)
    assert meta.optimizer() == "SGD" and meta.optimizers[0]["lr"] == 0.1
    assert meta.compiled is False and meta.functional_activations == {}
    assert meta.amp is None and meta.side_effects is None  # not written: the defaults
    # the run log's table, as it is: every key, the unknown one included
    assert meta["status"] == "finished" and meta["future_key"] == {"x": 1}
    assert "amp" not in meta and set(meta) >= {"status", "steps", "future_key"}
    assert not hasattr(meta, "future_key")
    after = meta.updated(status="crashed", exit_code=1)
    assert (after.status, after["exit_code"], meta.status) == ("crashed", 1, "finished")


def _nan_poisoned_run(out: Path, tensors: int = 6, steps: int = 24) -> Path:
    """A run whose step 5 has a NaN gradient in one tensor (skipped, as asked, and
    counted)."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(tensors // 2)])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    options = {"params": gradoc.every(4), "skip_nonfinite_updates": True}
    with gradoc.watch(model, opt, out=out, **options) as run:
        for step in range(steps):
            opt.zero_grad()
            model(torch.randn(8, 4)).pow(2).mean().backward()
            if step == 5:
                model[0].bias.grad[1] = float("nan")
            opt.step()
    return run.dir


def test_per_parameter_statistics_are_one_packed_row_per_step(tmp_path: Path) -> None:
    run = _nan_poisoned_run(tmp_path / "run", tensors=400)
    db = sqlite3.connect(run / "run.db")
    assert db.execute("select count(*) from param_arrays").fetchone()[0] == 24
    (size,) = db.execute(
        "select sum(length(layer_ids) + coalesce(length(grad_norm), 0) + "
        "coalesce(length(grad_nonfinite), 0)) from param_arrays "
        "where weight_norm is null"
    ).fetchone()
    # a gradient-norm step: 4 bytes of layer id and 8 of norm per tensor, counts only when
    # some are non-finite (step 5: 8 more per tensor)
    assert size == 18 * 400 * 12 + 400 * 8  # 24 steps, 6 of them weight steps
    log = gradoc.open_run(run)
    assert log.param("0.bias", "grad_nonfinite").at(5) == 1
    assert log.param("0.weight", "grad_nonfinite").at(5) == 0
    assert log.steps_with("weight_norm") == [0, 4, 8, 12, 16, 20]
    assert len(log.param("199.weight", "grad_norm")) == 24


def test_a_version_2_log_of_one_row_per_parameter_reads_the_same(tmp_path: Path) -> None:
    run = _nan_poisoned_run(tmp_path / "run")
    log = gradoc.open_run(run)
    table, at5 = log.param_table(), log.param_stats_at(5)
    rows = log._param_rows()
    log.close()
    shutil.copytree(run, tmp_path / "v2")
    db = sqlite3.connect(tmp_path / "v2" / "run.db")
    db.executescript(
        """
        DROP TABLE param_arrays;
        CREATE TABLE param_stats (step INTEGER NOT NULL, layer_id INTEGER NOT NULL,
            grad_norm REAL, grad_maxabs REAL, grad_nonfinite INTEGER, weight_norm REAL,
            update_norm REAL, PRIMARY KEY (step, layer_id)) WITHOUT ROWID;
        PRAGMA user_version=2;
        """
    )
    nan = [tuple("NaN" if v != v else v for v in r) for r in rows]  # v2 stores NaN as text
    db.executemany("INSERT INTO param_stats VALUES (?,?,?,?,?,?,?)", nan)
    db.commit()
    db.close()
    old = gradoc.open_run(tmp_path / "v2")
    assert old.version == 2 and not old._arrays
    same = old.param_table()
    assert str(dict(same)) == str(dict(table)) and str(old.param_stats_at(5)) == str(at5)
    assert old.steps_with("update_norm") == [0, 4, 8, 12, 16, 20]


def test_parameter_statistics_are_held_in_float32_only_where_that_is_exact() -> None:
    """A float32 model's norms are held in half the memory; a value float32 would round (a
    float64 measure) or overflow (a norm measured again in float64) keeps its statistic in
    float64, so that every value reads back as stored; NaN stays NaN."""
    import numpy as np

    from gradoc.store.reader import _Block

    exact = np.array([0.5, np.float32(0.1), np.nan], dtype=np.float64)
    block = _Block(np.arange(3, dtype=np.int32), {"grad_norm": 2, "weight_norm": 1})
    block.add(0, "grad_norm", exact)
    block.add(1, "grad_norm", exact * 2)
    block.add(2, "grad_norm", exact * 4)  # one row more than counted (a running log)
    block.add(0, "weight_norm", np.array([0.1, 1e300, 2.0]))
    block.add(0, "grad_nonfinite", np.array([], dtype=np.float64))
    block.done()
    steps, norms = block.stats["grad_norm"]
    assert steps.tolist() == [0, 1, 2] and norms.dtype == np.float32
    assert np.array_equal(norms, np.stack([exact, exact * 2, exact * 4]), equal_nan=True)
    _, weights = block.stats["weight_norm"]
    assert weights.dtype == np.float64 and weights[0].tolist() == [0.1, 1e300, 2.0]


@pytest.mark.parametrize("n", [1, 3, 50, 64, 65, 1000])
@pytest.mark.parametrize("width", [2, 10, 37])
def test_rows_are_inserted_a_chunk_per_statement_as_executemany_would(n: int, width: int) -> None:
    """The writer thread lets go of the GIL once per statement's step: a record's rows go in
    a few statements (chunks of powers of two, at most 999 values each), never one per row,
    and the table holds what ``executemany`` would have left (a later row replacing an
    earlier one of the same key)."""
    from gradoc.store.writer import insert_rows

    rng = random.Random(n * 100 + width)
    rows = [(rng.randrange(2 * n), *(rng.random() for _ in range(width - 1))) for _ in range(n)]
    cols = ", ".join(f"c{i}" for i in range(1, width))
    made = []
    for conn in (sqlite3.connect(":memory:"), sqlite3.connect(":memory:")):
        conn.execute(f"CREATE TABLE t (c0 INTEGER PRIMARY KEY, {cols})")
        made.append(conn)
    by_row, chunked = made
    by_row.executemany(f"INSERT OR REPLACE INTO t VALUES ({','.join('?' * width)})", rows)
    statements: list[str] = []
    chunked.set_trace_callback(statements.append)
    insert_rows(chunked, "t", rows)
    inserts = [s for s in statements if s.startswith("INSERT")]
    most = 1 << (min(64, 999 // width).bit_length() - 1)
    assert len(inserts) <= n // most + (n % most).bit_length()
    assert len(inserts) < n or n == 1
    read = "SELECT * FROM t ORDER BY c0"
    assert chunked.execute(read).fetchall() == by_row.execute(read).fetchall()
