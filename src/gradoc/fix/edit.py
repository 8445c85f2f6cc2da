"""An edit of the user's code: lines replaced, shown as a diff, applied all or nothing.

The writers (``fix.patch``, ``fix.idiom``) make edits (:class:`Edit`) from the line the run located;
an edit is checked against the file before it is applied anywhere: the lines must still read
as the run saw them, or it is refused whole (:class:`EditFailed`).
"""

from __future__ import annotations

import difflib
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from .._util.json_types import JsonObject
from ..errors import GradocError


class EditFailed(GradocError):
    """An edit that cannot be applied as shown (the file changed since the run)."""


@dataclass(frozen=True, slots=True)
class Edit:
    """One line of the user's code replaced by ``after`` (one line or more)."""

    finding: str
    """The kind of the finding it answers."""
    file: str
    line: int
    before: str
    """The line as the run read it (its indentation included)."""
    after: tuple[str, ...]
    action: str
    """What the edit does, in words."""
    remedy: str | None = None
    """The no-code remedy this edit writes into the code (``lr_scale``), if it is one."""
    scale: float | None = None
    """The factor a learning-rate edit scales the rate by."""
    objective: bool = False
    """The edit changes what the loss computes (a log-probability for a probability, batch
    statistics for fixed ones): the loss before and after are different quantities, and are
    not compared."""
    end: int | None = None
    """The last line replaced, where the edit replaces a statement written over several
    lines (``before`` then holds them, joined by newlines)."""

    def describe(self) -> str:
        return f"{self.action} ({Path(self.file).name}:{self.line}), for {self.finding}"

    def diff(self, path: Path | None = None) -> str:
        """The unified diff of the edit, against ``path`` (default: the file itself)."""
        lines = _lines(path or Path(self.file))
        new = self.applied(lines)
        name = os.path.relpath(self.file)  # as ``git diff`` names it, from where it was asked
        a, b = ("a/" + name, "b/" + name) if not name.startswith("..") else (self.file,) * 2
        return "".join(difflib.unified_diff(lines, new, a, b, n=2))

    def applied(self, lines: list[str]) -> list[str]:
        """``lines`` (of the file, with their ends) with the edit made; :class:`EditFailed`
        when the line no longer reads as the run saw it."""
        at, last = self.line - 1, (self.end or self.line)
        held = "\n".join(t.rstrip("\r\n") for t in lines[at:last])
        if not 0 <= at < last <= len(lines) or held != self.before:
            raise EditFailed(
                f"{self.file}:{self.line} no longer reads as the run saw it "
                f"({self.before.strip()!r}); the edit was not applied"
            )
        end = lines[at][len(lines[at].rstrip("\r\n")) :] or "\n"
        return [*lines[:at], *(text + end for text in self.after), *lines[last:]]

    def apply(self, path: Path | None = None) -> None:
        """Make the edit in ``path`` (default: the file itself), all or nothing."""
        target = path or Path(self.file)
        new = self.applied(_lines(target))
        target.write_text("".join(new))

    def to_json(self) -> JsonObject:
        out = asdict(self)
        out["after"] = list(self.after)
        return out


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines(keepends=True)
    except OSError as exc:
        raise EditFailed(f"cannot read {path} to edit it: {exc}") from exc


def merged(a: Edit, b: Edit) -> Edit | None:
    """Two edits of one file made as one (the lines between them kept as they are), where
    their lines do not overlap; None otherwise. The file must read as both were written."""
    if a.file != b.file:
        return None
    first, second = sorted((a, b), key=lambda e: e.line)
    last = second.end or second.line
    if (first.end or first.line) >= second.line:
        return None
    lines = _lines(Path(a.file))
    try:
        new = first.applied(second.applied(lines))  # the later lines first: no shift
    except EditFailed:
        return None
    grown = sum(len(e.after) - ((e.end or e.line) - e.line + 1) for e in (first, second))
    cut = [t.rstrip("\r\n") for t in new[first.line - 1 : last + grown]]
    return Edit(
        first.finding,
        a.file,
        first.line,
        "\n".join(t.rstrip("\r\n") for t in lines[first.line - 1 : last]),
        tuple(cut),
        f"{first.action}; and {second.action}",
        objective=a.objective or b.objective,
        end=last if last > first.line else None,
    )
