"""The code's shape, held where a redesign left it (issue 61): the renderers, sinks, ``gradoc
fix`` and ``gradoc diff`` read typed records, not JSON back by its keys (the size of a class
is held by ``tests/test_registry.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

import gradoc

ROOT = Path(gradoc.__file__).parent

TYPED = ("report", "sinks", "fix", "compare")
"""The packages that take the typed report (``analysis.Report``) and the run log's typed
records: what they read by a string key is counted."""

MOST_KEY_READS = 40


def key_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """Reads by a literal string key: ``x["key"]`` (not as an assignment's target) and
    ``x.get("key")``."""
    stored = {
        id(t)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
    }
    found = []
    for n in ast.walk(tree):
        if (
            isinstance(n, ast.Subscript)
            and id(n) not in stored
            and isinstance(n.slice, ast.Constant)
            and isinstance(n.slice.value, str)
        ):
            found.append((n.lineno, n.slice.value))
        elif (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "get"
            and n.args
            and isinstance(n.args[0], ast.Constant)
            and isinstance(n.args[0].value, str)
        ):
            found.append((n.lineno, n.args[0].value))
    return found


def test_the_typed_side_reads_few_string_keys() -> None:
    reads = {
        str(path.relative_to(ROOT)): found
        for package in TYPED
        for path in sorted((ROOT / package).rglob("*.py"))
        if (found := key_reads(ast.parse(path.read_text())))
    }
    total = sum(len(r) for r in reads.values())
    assert total <= MOST_KEY_READS, f"{total} string-key reads: {reads}"


def test_the_key_count_sees_reads_and_not_writes() -> None:
    tree = ast.parse('x = d["a"]\nd["b"] = 1\ny = m.get("c")\nz = d[k]\n')
    assert key_reads(tree) == [(1, "a"), (3, "c")]
