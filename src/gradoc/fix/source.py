"""A user's file parsed for an edit: its text, lines and tree, the line the run located, and
the edit that rewrites the lines a set of changes touches (``fix.idiom``, ``fix.causal`` and
``fix.made`` write their changes on it)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._util.json_types import JsonObject
from ..detect.finding import Finding, Origin
from ..store.meta import RunMeta
from .edit import Edit

Replace = tuple[ast.expr | ast.stmt, str]
"""An expression (or a statement) of the file and the text that replaces it."""


@dataclass(frozen=True, slots=True)
class Source:
    """The located file, parsed, and the line the run located."""

    text: str
    lines: list[str]
    tree: ast.Module
    line: int
    functional: str
    """How the file names ``torch.nn.functional`` (``F`` where it imports it so)."""

    def seg(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.text, node) or ""

    def offset(self, line: int, col: int) -> int:
        """The character offset in ``text`` of ``col`` (a UTF-8 byte column) on ``line``."""
        before = sum(len(t) for t in self.text.splitlines(keepends=True)[: line - 1])
        return before + len(self.lines[line - 1].encode()[:col].decode(errors="ignore"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        start = self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self.offset(node.end_lineno or node.lineno, node.end_col_offset or 0)  # type: ignore[attr-defined]
        return start, end

    def spliced(self, outer: ast.AST, changes: list[Replace]) -> str:
        """``outer``'s source (the whole file's for the module) with the (inner, disjoint)
        ``changes`` made."""
        start, end = (0, len(self.text)) if isinstance(outer, ast.Module) else self.span(outer)
        text = self.text[start:end]
        for (a, b), new in sorted(((self.span(n), t) for n, t in changes), reverse=True):
            text = text[: a - start] + new + text[b - start :]
        return text

    def indent(self, node: ast.AST) -> str:
        line = self.lines[node.lineno - 1]  # type: ignore[attr-defined]
        return line[: len(line) - len(line.lstrip())]

    def fresh(self, base: str, within: ast.AST | None = None) -> str:
        """``base``, or ``base`` numbered, as a name the file (or the function ``within``,
        for a local of it) does not use yet."""
        scope = self.tree if within is None else within
        used = {n.id for n in ast.walk(scope) if isinstance(n, ast.Name)}
        used |= {n.arg for n in ast.walk(scope) if isinstance(n, ast.arg)}
        name, i = base, 2
        while name in used:
            name, i = f"{base}{i}", i + 1
        return name

    def imports(self, module: str) -> bool:
        """The file imports ``module`` under its own name (``import math``)."""
        return any(
            isinstance(n, ast.Import) and any(a.name == module and not a.asname for a in n.names)
            for n in ast.walk(self.tree)
        )

    def at_line(self) -> Iterator[ast.AST]:
        """The nodes that start on the located line (the statement's own first)."""
        for n in ast.walk(self.tree):
            if getattr(n, "lineno", None) == self.line:
                yield n

    def scope(self) -> ast.AST:
        """The innermost function holding the located line (else the module): the same
        unstable expression written again there is written stably too."""
        found = [
            n
            for n in ast.walk(self.tree)
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            and n.lineno <= self.line <= (n.end_lineno or n.lineno)
        ]
        return max(found, key=lambda n: n.lineno, default=self.tree)

    def statement(self, line: int | None = None) -> ast.stmt | None:
        """The innermost statement holding ``line`` (default: the located one)."""
        line = self.line if line is None else line
        found = [
            n
            for n in ast.walk(self.tree)
            if isinstance(n, ast.stmt)
            and n.lineno <= line <= (n.end_lineno or n.lineno)
            and not isinstance(n, _BLOCKS)
        ]
        return min(found, key=lambda n: (n.end_lineno or n.lineno) - n.lineno, default=None)


_BLOCKS = (
    ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.For, ast.AsyncFor, ast.While,
    ast.If, ast.With, ast.AsyncWith, ast.Try,
)  # fmt: skip


def parsed(path: Path) -> Source | None:
    """A user's file, parsed, with no located line (an edit of what it makes)."""
    return located_source(Origin(phase="", step=0, file=str(path), line=1))


def located_source(origin: Origin) -> Source | None:
    try:
        text = Path(str(origin.file)).read_text()
        tree = ast.parse(text)
    except (OSError, SyntaxError, ValueError):
        return None
    lines = text.splitlines()
    line = int(origin.line or 0)
    if not 0 < line <= len(lines):
        return None
    if origin.code is not None and lines[line - 1].strip() != origin.code.strip():
        return None  # the file changed since the run
    functional = "torch.nn.functional"
    for n in ast.walk(tree):
        if isinstance(n, ast.Import | ast.ImportFrom):
            for alias in n.names:
                full = f"{n.module}.{alias.name}" if isinstance(n, ast.ImportFrom) else alias.name
                if full == "torch.nn.functional" and alias.asname:
                    functional = alias.asname
    return Source(text, lines, tree, line, functional)


def edit_of(
    f: Finding, src: Source, file: str, changes: list[Replace], action: str, **more: Any
) -> Edit | None:
    """The lines the changes touch, rewritten; one edit spanning them (``more``: the edit's
    other fields, ``objective``)."""
    first = min(n.lineno for n, _ in changes)
    last = max(n.end_lineno or n.lineno for n, _ in changes)
    stmt = src.statement(first)
    if stmt is not None:  # the whole statement, so that the edit reads as code
        first, last = min(first, stmt.lineno), max(last, stmt.end_lineno or stmt.lineno)
    text = src.spliced(src.tree, changes)
    before = src.lines[first - 1 : last]
    grown = len(text.splitlines()) - len(src.lines)
    after = text.splitlines()[first - 1 : last + grown]
    if after == before:
        return None
    return Edit(
        f.kind,
        file,
        first,
        "\n".join(before),
        tuple(after),
        action,
        end=last if last > first else None,
        **more,
    )


@dataclass(frozen=True, slots=True)
class Seen:
    """What a writer reads besides its finding: the run log's ``meta`` (the lines the run
    recorded: ``forward_at``, ``optimizers[i].at``, ``loss_fn.at``) and the user's source
    files (the script, then the files next to it)."""

    meta: RunMeta
    sources: tuple[Path, ...] = ()
    why: list[str] = field(default_factory=list)
    """Why a writer wrote no edit, where it can say (``fix.made``): for the terminal."""


def name_of(n: ast.AST) -> str:
    """The name a call (or a function expression) calls: ``torch.tril(x)`` -> ``tril``,
    ``x.sum(1)`` -> ``sum``, ``softmax`` -> ``softmax``; "" for anything else."""
    if isinstance(n, ast.Call):
        n = n.func
    if isinstance(n, ast.Attribute):
        return n.attr
    return n.id if isinstance(n, ast.Name) else ""


def details_of(f: Finding) -> JsonObject:
    """A finding's details as JSON (typed details, or those read back from a report)."""
    return f.details if isinstance(f.details, dict) else f.details.to_json()
