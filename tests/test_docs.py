"""The docs site: it builds with ``mkdocs build --strict``, its findings reference has a
section for every finding kind the code knows (written from the code, so it cannot drift),
and nothing gradoc prints names a file that an installed gradoc does not have."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import gradoc
from gradoc.findings import KINDS, REGISTRY
from gradoc.report import reference

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(gradoc.__file__).parent


def test_the_site_builds_strict_with_a_section_for_every_finding_kind(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert set(REGISTRY) == {k.name for k in KINDS}
    page = (site / "findings" / "index.html").read_text()
    sections = set(re.findall(r'<h2 id="([a-z0-9_]+)"', page))
    assert set(REGISTRY) <= sections, sorted(set(REGISTRY) - sections)
    # each section has the rule from its detector, and the causes and fixes of its diagnosis
    exploding = page[page.index('<h2 id="exploding_gradients"') :]
    exploding = exploding[: exploding.index('<h2 id="vanishing_gradients"')]
    assert "SCALE_RATIO" in exploding and "ZClip" in exploding
    assert "weight initialisation too large for the depth" in exploding
    assert "lower the learning rate by 10x" in exploding
    api = (site / "api" / "index.html").read_text()
    for name in gradoc.__all__:
        if name != "__version__":
            assert f'id="gradoc.api.{name}"' in api, name


def test_the_committed_reference_is_the_one_the_code_writes() -> None:
    page = (ROOT / "docs" / "findings.md").read_text()
    assert reference.inserted(page) == page, (
        "docs/findings.md is stale: python -m gradoc.report.reference docs/findings.md"
    )


def _messages(path: Path) -> list[tuple[int, str]]:
    """A module's string constants that are not docstrings: what it may print or write."""
    tree = ast.parse(path.read_text())
    documented = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in documented
    ]


REPOSITORY_ONLY = re.compile(r"benchmarks/|tests/|docs/|DESIGN\.md|\.\./shared|README")


def test_no_message_names_a_file_the_installed_package_does_not_have() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{line}: {text[:80]}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, text in _messages(path)
        if REPOSITORY_ONLY.search(text)
    ]
    assert not found, "\n".join(found)


def test_the_message_check_reads_messages_not_docstrings(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('"""see benchmarks/x.py"""\nprint("see benchmarks/y.py")\n')
    assert [text for _, text in _messages(module)] == ["see benchmarks/y.py"]
