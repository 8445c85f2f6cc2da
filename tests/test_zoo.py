"""The hostile zoo: small programs of shapes real code has that break a naive watcher, each
run plain, under ``gradoc run`` and under ``gradoc.watch``: the same stdout byte for byte,
the same files written and the same exit code, and a report that says what was watched.

Each program lives in ``tests/zoo`` and seeds what it draws from (``gradoc run`` seeds
the generators too, so a program that does not would differ between any two runs). Under
``gradoc.watch`` the program wraps its loop in ``_zoo.watching(model, optimizer)``, which is
``gradoc.watch`` only when ``ZOO_WATCH`` names a run directory. The three runs happen one
after the other in the same folder (so a path the program prints or a traceback is the
same); the run directories lie outside it. ``benchmarks/differential.py`` runs the same
comparison on the zoo and on ``../shared/real-programs*``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ZOO = Path(__file__).parent / "zoo"
PROGRAMS = sorted(p.name for p in ZOO.glob("*.py") if not p.name.startswith("_"))
TIMEOUT = 240


def files(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (``__pycache__`` left out): its path and its sha256."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def run(folder: Path, program: str, how: str, out: Path) -> tuple[int, bytes, str, dict]:
    """The program in a fresh copy of the zoo at ``folder``: ``plain``, ``run`` (``gradoc
    run --out OUT``) or ``watch`` (``gradoc.watch(out=OUT)``): exit code, stdout, stderr and
    the files it left."""
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(ZOO, folder, ignore=shutil.ignore_patterns("__pycache__"))
    before = files(folder)
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env.pop("ZOO_WATCH", None)
    command = [sys.executable, program]
    if how == "run":
        command = [sys.executable, "-m", "gradoc", "run", "--out", str(out), program]
    elif how == "watch":
        env["ZOO_WATCH"] = str(out)
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, timeout=TIMEOUT)
    left = {k: v for k, v in files(folder).items() if before.get(k) != v}
    return done.returncode, done.stdout, done.stderr.decode(errors="replace"), left


EXPECT: dict[str, dict[str, object]] = {
    # what each report must say beyond "a report": steps watched, findings, unwatched parts
    "nan_to_the_end.py": {"kinds": ["nonfinite"]},
    "sys_exit_in_loop.py": {"exit": 3},
    "system_exit_message.py": {"exit": 1},
    "excepthook.py": {"exit": 1},
    "vmap_per_sample.py": {"steps": 20, "loss_read": 0, "kinds": ["loss_unread"]},
    "loss_from_method.py": {"steps": 60, "loss_read": 60},
    "scalar_loop_loss.py": {"loss_read": 25},
    "autograd_grad_only.py": {"steps": 30},
}


@pytest.mark.parametrize("program", PROGRAMS)
def test_a_hostile_program_runs_under_gradoc_as_without_it(tmp_path: Path, program: str) -> None:
    folder = tmp_path / "work"
    plain = run(folder, program, "plain", tmp_path / "unused")
    expect = EXPECT.get(program, {})
    assert plain[0] == expect.get("exit", 0), plain[2][-2000:]
    for how in ("run", "watch"):
        out = tmp_path / how
        code, stdout, stderr, left = run(folder, program, how, out)
        assert code == plain[0], f"{how}: exit {code} for {plain[0]}\n{stderr[-3000:]}"
        assert stdout == plain[1], (
            f"{how}: stdout differs\n{stdout!r}\n{plain[1]!r}\n{stderr[-3000:]}"
        )
        assert left == plain[3], f"{how}: files differ: {left} vs {plain[3]}"
        assert "internal error" not in stderr and "Traceback (most recent call last)" not in (
            stderr if program != "excepthook.py" else ""
        ), stderr[-3000:]
        _reported(out, program, how, expect)


def _reported(out: Path, program: str, how: str, expect: dict[str, object]) -> None:
    """The run left a report that says how much it watched."""
    report = json.loads((out / "report.json").read_text())
    assert report["schema"] == "gradoc.report/1"
    facts = report["run"]
    assert facts["steps"] > 0, f"{how}: {program} watched no step: {report.get('not_watched')}"
    if "steps" in expect:
        assert facts["steps"] == expect["steps"], facts
    objective = (facts.get("objectives") or [{}])[0]
    if "loss_read" in expect:
        assert objective.get("loss_read") == expect["loss_read"], objective
    kinds = [f["kind"] for f in report["findings"] if f["severity"] in ("warning", "error")]
    for kind in expect.get("kinds", []):  # type: ignore[attr-defined]
        assert kind in kinds, f"{how}: {kind} not in {kinds}"
    assert "monitoring_stopped" not in kinds, report["findings"]
