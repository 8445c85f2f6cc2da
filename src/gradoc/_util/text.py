"""Text from the user's program or a run log, made safe to print on a terminal.

Module names, exception messages, paths and source lines end up on the user's terminal.
A name like ``\\x1b]52;...`` (an escape sequence that writes the clipboard) or
``\\x1b[2J`` (clear the screen) must not reach it raw, nor must a bidirectional override
(U+202E) reorder what a person reads. ``safe`` shows every such character as a visible
escape instead, keeping newlines and tabs. Rich markup is a separate matter: ``report/``
passes user text to rich as ``Text`` objects, never as markup strings.
"""

from __future__ import annotations

import math
import re
from enum import Enum

# C0 controls but tab and newline, DEL, C1 controls, and the Unicode bidi controls
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe(text: object) -> str:
    """``text`` as a string with control characters shown as escapes (``\\x1b``).

    >>> safe("layer\\x1b[2J")
    'layer\\\\x1b[2J'
    """
    s = text if isinstance(text, str) else str(text)
    s = _UNSAFE.sub(_escape, s)
    # a path that is not valid UTF-8 arrives with lone surrogates: show them, never crash
    return _SURROGATE.sub(lambda m: f"\\x{ord(m.group()) - 0xDC00:02x}", s)


def one_line(text: object) -> str:
    """``safe`` for a field that must stay on one line (a name): newlines shown as ``\\n``."""
    return safe(text).replace("\n", "\\n").replace("\t", "\\t")


def module_label(module: str | None) -> str:
    """How a report names an origin's module: None is code outside every watched model
    (the training loop), "" the watched model's own ``forward`` (outside its submodules)."""
    if module is None:
        return "code outside the model"
    return module or "the model's own forward"


def number(x: float | int | None, digits: int = 4) -> str:
    """A number for people, the one way gradoc writes them: ``digits`` significant digits,
    counts as integers with separators, NaN and infinities as Python spells them in lower
    case, a missing value as "-".

    >>> number(0.000123456), number(12345), number(float("-inf")), number(2.5e-9, 3)
    ('0.0001235', '12,345', '-inf', '2.5e-09')
    """
    if x is None:
        return "-"
    if isinstance(x, int) and not isinstance(x, bool):
        return f"{x:,}"
    if not math.isfinite(x):
        return repr(float(x)).lower()
    return f"{x:.{digits}g}"


class StrEnum(str, Enum):
    """A vocabulary whose members are their names as strings (``enum.StrEnum`` is 3.11+):
    ``EventKind.CRASH == "crash"``, and str(), f-strings, JSON and SQLite see the value."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    def __repr__(self) -> str:
        return repr(self.value)
