"""The README's and the docs' examples are tests: their Python blocks run, their gradoc
commands run.

The README runs in a directory of its own. The docs pages run one after another, in the
site's order (``mkdocs.yml``), in one directory, as a reader who follows them does: a
page may use a file an earlier page made (``train.py``, ``logreg.py``, ``runs/quickstart``).
A page's Python blocks run in order in one namespace (a block whose first line is
``# NAME.py`` is written to that file instead), then its command lines.
"""

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

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BLOCK = re.compile(r"```(python|bash)\n(.*?)```", re.S)
COMMANDS = ("gradoc run", "gradoc report", "gradoc fix", "gradoc replay", "sqlite3 ")


def docs_pages() -> list[Path]:
    """The docs pages in the site's order (the nav of ``mkdocs.yml``)."""
    nav = re.findall(r"^\s+- [^:]+: (\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    return [ROOT / "docs" / name for name in nav]


SNIPPET = re.compile(r'^--8<-- "([^":]+):([\w-]+)"$', re.M)


def expanded(page: Path) -> str:
    """A page as the site shows it: a ``--8<-- "FILE:SECTION"`` line (pymdownx.snippets)
    is the section of FILE between its ``[start:SECTION]`` and ``[end:SECTION]`` markers."""

    def section(m: re.Match[str]) -> str:
        text = (ROOT / m[1]).read_text()
        start = re.search(rf"^.*--8<-- \[start:{m[2]}\].*\n", text, re.M)
        end = re.search(rf"^.*--8<-- \[end:{m[2]}\].*$", text, re.M)
        assert start and end, f"{m[1]} has no section {m[2]!r}"
        return text[start.end() : end.start()]

    return SNIPPET.sub(section, page.read_text())


def blocks(page: Path, kind: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(expanded(page)) if lang == kind]


def commands(page: Path) -> list[str]:
    """A page's `gradoc ...` and `sqlite3 ...` command lines (comments stripped)."""
    found = []
    for body in blocks(page, "bash"):
        for line in body.splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line.startswith(COMMANDS):
                found.append(line)
    return found


def run_page(page: Path, here: Path) -> list[str]:
    """Run one page's examples in ``here``; its commands, run."""
    namespace: dict[str, object] = {"__name__": "__docs__"}
    for body in blocks(page, "python"):
        first = body.splitlines()[0]
        if first.startswith("# ") and first.split()[1].endswith(".py"):
            (here / first.split()[1]).write_text(body)  # a script file, run by a command
            continue
        exec(compile(body, str(page), "exec"), namespace)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    lines = commands(page)
    for line in lines:
        argv = shlex.split(line)
        if argv[0] == "sqlite3" and shutil.which("sqlite3") is None:
            continue
        if argv[0] == "gradoc":
            argv = [sys.executable, "-m", "gradoc", *argv[1:]]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, (page.name, line, done.stderr)
    return lines


def test_readme_python_examples_and_commands_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    lines = run_page(README, tmp_path)
    assert any(c.startswith("gradoc run") for c in lines)
    assert (tmp_path / "runs/quickstart/report.json").exists()
    assert (tmp_path / "runs/train/report.json").exists()
    done = subprocess.run([sys.executable, "train.py"], capture_output=True, text=True, check=True)
    assert "done" in done.stdout


def test_docs_examples_and_commands_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    pages = docs_pages()
    assert {p.name for p in pages} == {p.name for p in (ROOT / "docs").glob("*.md")}
    ran = {page.name: run_page(page, tmp_path) for page in pages}
    assert any(c.startswith("gradoc run") for c in ran["gradoc-run.md"])
    assert (tmp_path / "runs/quickstart/report.json").exists()
    assert (tmp_path / "runs/guarded/report.json").exists()
    assert (tmp_path / "report.json").exists()  # from --json
    assert "amp" in json.loads((tmp_path / "runs/amp/report.json").read_text())


def test_readme_set_up_commands_are_the_ones_ci_runs() -> None:
    setup = [b for b in blocks(README, "bash") if "pip install" in b]
    assert any("gradoc demo" in b for b in setup)
    test_cmd = next(b for b in setup if "pytest" in b)
    ci = (ROOT / ".ci/run").read_text()
    assert "requirements-dev.txt" in test_cmd and "requirements-dev.txt" in ci
    assert "python -m pytest" in test_cmd and "python -m pytest" in ci


def test_docs_include_the_readme_instead_of_repeating_it() -> None:
    """The home page, getting started and gradoc run show the README's own sections."""
    for name, section in (
        ("index.md", "intro"),
        ("getting-started.md", "setup"),
        ("getting-started.md", "quickstart"),
        ("gradoc-run.md", "train"),
    ):
        page = ROOT / "docs" / name
        assert f'--8<-- "README.md:{section}"' in page.read_text(), (name, section)
        assert len(expanded(page)) > len(page.read_text())
    readme = [line for line in README.read_text().splitlines() if len(line) > 60]
    for page in docs_pages():
        shared = [line for line in page.read_text().splitlines() if line in readme]
        assert len(shared) <= 5, (page.name, shared)


def test_readme_is_read_in_five_minutes() -> None:
    assert len(README.read_text().splitlines()) <= 250
