"""Where a non-finite value was born: the user's frame and the source around it, for an
:class:`~gradoc.detect.finding.Origin` (report.json's ``origin``)."""

from __future__ import annotations

import itertools
import linecache
import re
import sys
import sysconfig
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import torch

from .._util.json_types import JsonObject
from ..detect.finding import CodeLine, Origin, SourceLines

_GRADOC = str(Path(__file__).resolve().parents[1])
_DEMO = str(Path(_GRADOC) / "demo")  # the demo's models are user code, not gradoc's
_SKIP = (str(Path(torch.__file__).parent), _GRADOC, sysconfig.get_paths()["stdlib"])
# a frame and its code line; frames without one (runpy's, frozen) are followed directly by
# the next frame, which must not be taken for their code
_FRAME = re.compile(
    r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>[^\n]+)'
    r'(?:\n[ \t]*(?P<code>(?!File ")\S[^\n]*))?'
)


Frame = tuple[str, int, str]
"""A line of the user's code: (file, line number, the code on it)."""


def place(origin: Origin, frame: Frame | None) -> None:
    """Put ``origin`` at ``frame`` (file, line, code), with the source around it read now."""
    if frame is not None:
        origin.file, origin.line, origin.code = frame
        origin.source = source_context(origin.file, origin.line)


CONTEXT_LINES = 3
"""Lines kept on each side of the origin's line."""
MAX_LINE = 240
"""Characters kept of each source line."""


def source_context(file: str, line: int, context: int = CONTEXT_LINES) -> SourceLines | None:
    """The source around ``file:line``, read now, while it is the code that ran (Python's
    ``linecache``, which holds the source of every module it has shown a traceback for)."""
    lines = linecache.getlines(file)
    if not lines or not 1 <= line <= len(lines):
        return None
    lo, hi = max(1, line - context), min(len(lines), line + context)
    return SourceLines(lo, [t.rstrip("\r\n")[:MAX_LINE] for t in lines[lo - 1 : hi]])


def _user(file: str) -> bool:
    if file.startswith(_DEMO):
        return True
    return not file.startswith(_SKIP) and not file.startswith("<")


def user_frame(stack: list[traceback.FrameSummary] | None = None) -> Frame | None:
    """The innermost frame of the user's own code (outside torch, gradoc and the stdlib)."""
    frames = stack if stack is not None else traceback.extract_stack(sys._getframe(1))
    for fr in reversed(frames):
        if _user(fr.filename) and fr.lineno is not None:
            return fr.filename, fr.lineno, (fr.line or "").strip()
    return None


def user_line() -> JsonObject | None:
    """The innermost line of the user's code running now, as report.json's ``CodeLine``
    holds one (``file``, ``line``, ``code``): where a fix's edit goes (read once, never per
    step: it walks the stack)."""
    at = user_frame()
    return None if at is None else CodeLine(*at).to_json()


def user_line_holding(key: str, holds: Callable[[Any], bool]) -> JsonObject | None:
    """:func:`user_line`, with ``key`` naming the variable of that frame (its locals first,
    then its globals) whose value ``holds`` accepts, None when none does: where a fix's edit
    goes, and the name it writes there (``opt`` of ``opt.zero_grad()``). Read once, never per
    step."""
    frame = user_frame_object(1)
    if frame is None:
        return None
    file, line = frame.f_code.co_filename, frame.f_lineno
    names = itertools.chain(frame.f_locals.items(), frame.f_globals.items())
    held = next((k for k, v in names if holds(v)), None)
    return {**CodeLine(file, line, linecache.getline(file, line).strip()).to_json(), key: held}


def user_frame_object(depth: int = 0) -> FrameType | None:
    """The innermost frame of the user's code, from ``depth`` frames above the caller (its
    variables are read where a report names them)."""
    return next(user_frames(depth + 1), None)


def user_frames(depth: int = 0) -> Iterator[FrameType]:
    """The frames of the user's code, innermost first, from ``depth`` frames above the
    caller."""
    frame: FrameType | None = sys._getframe(depth + 1)
    while frame is not None:
        if _user(frame.f_code.co_filename):
            yield frame
        frame = frame.f_back


def frame_from_text(lines: list[str] | str) -> Frame | None:
    """The innermost user frame of a formatted stack (anomaly mode's ``traceback_``)."""
    text = "".join(lines) if isinstance(lines, list) else lines
    found = None
    for m in _FRAME.finditer(text):
        if _user(m["file"]):
            found = (m["file"], int(m["line"]), (m["code"] or "").strip())
    return found
