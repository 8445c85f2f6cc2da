"""The README's examples are tests: its Python blocks run in order, its gradoc commands run."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"```(python|bash)\n(.*?)```", re.S)


def blocks(kind: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(README.read_text()) if lang == kind]


def commands() -> list[str]:
    """The README's `gradoc ...` and `sqlite3 ...` command lines (comments stripped)."""
    found = []
    for body in blocks("bash"):
        for line in body.splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line.startswith(
                ("gradoc run", "gradoc report", "gradoc fix", "gradoc replay", "sqlite3 ")
            ):
                found.append(line)
    return found


def test_readme_python_examples_and_commands_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__readme__"}
    for body in blocks("python"):
        first = body.splitlines()[0]
        if first.startswith("# ") and first.split()[1].endswith(".py"):
            (tmp_path / first.split()[1]).write_text(body)  # a script file, run below
            continue
        exec(compile(body, str(README), "exec"), namespace)
    assert (tmp_path / "runs/quickstart/report.json").exists()
    assert (tmp_path / "runs/guarded/report.json").exists()
    assert (tmp_path / "train.py").exists()

    lines = commands()
    assert any(c.startswith("gradoc run") for c in lines)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    for line in lines:
        argv = shlex.split(line)
        if argv[0] == "sqlite3" and shutil.which("sqlite3") is None:
            continue
        if argv[0] == "gradoc":
            argv = [sys.executable, "-m", "gradoc", *argv[1:]]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, (line, done.stderr)
    assert (tmp_path / "report.json").exists()  # from --json
    assert "amp" in json.loads((tmp_path / "runs/amp/report.json").read_text())
    assert (
        "done"
        in subprocess.run(
            [sys.executable, "train.py"], capture_output=True, text=True, check=True
        ).stdout
    )


def test_readme_set_up_commands_are_the_ones_ci_runs() -> None:
    setup = [b for b in blocks("bash") if "pip install" in b]
    assert any("gradoc demo" in b for b in setup)
    test_cmd = next(b for b in setup if "pytest" in b)
    ci = (README.parent / ".ci/run").read_text()
    assert "requirements-dev.txt" in test_cmd and "requirements-dev.txt" in ci
    assert "python -m pytest" in test_cmd and "python -m pytest" in ci
