"""Output paths, checked before any work starts.

A mistake in an output path must cost the user one line, not a training run: every file
and directory gradoc will write is checked before the script starts (is it a directory,
is its directory there, can it be written, would it overwrite a run log or a source
file), and every path is made absolute then, so a script that changes directory
(``os.chdir``, Hydra's ``hydra.job.chdir=True``) does not move gradoc's outputs.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path

from ..errors import UsageError
from .text import one_line

SOURCE_SUFFIXES = frozenset({".py", ".pyw", ".pyi", ".pyx", ".ipynb"})
"""Files gradoc never writes over, whatever flag names them."""
_SQLITE_HEADER = b"SQLite format 3\x00"


def is_run_log(path: Path) -> bool:
    """A regular file that is a SQLite database (a run log, or something as precious)."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            return False
        with open(path, "rb") as f:
            return f.read(16) == _SQLITE_HEADER
    except OSError:
        return False


def _same(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def _probe_dir(directory: Path, shown: str) -> None:
    """Create and remove a file in ``directory``: the only test that a read-only mount, a
    permission or a missing device cannot fool (``os.access`` says yes to root)."""
    try:
        fd, name = tempfile.mkstemp(dir=directory, prefix=".gradoc-probe-")
    except OSError as exc:
        raise UsageError(f"{shown}: cannot write in {one_line(directory)}: {_why(exc)}") from None
    os.close(fd)
    os.unlink(name)


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def output_file(
    path: str | os.PathLike[str], flag: str, *, protect: Mapping[Path, str] | None = None
) -> Path:
    """Check a file gradoc will write (``--json PATH``, ``--html PATH``); return it absolute.

    Refused: a directory; a path whose directory does not exist or cannot be written; a
    FIFO or socket (opening one would block or fail late); an existing run log or Python
    source, or a path in ``protect`` (``{path: "the script", ...}``).
    """
    p = Path(path)
    shown = f"{flag} {one_line(os.fspath(path))}"
    full = Path(os.path.abspath(p))
    for q, what in (protect or {}).items():
        if full == Path(os.path.abspath(q)) or _same(full, q):
            raise UsageError(f"{shown}: that is {what}; choose another path")
    try:
        st = full.stat()
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise UsageError(f"{shown}: {_why(exc)}") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{shown}: is a directory; give a file path")
        if stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode):
            raise UsageError(f"{shown}: is not a regular file")
        if stat.S_ISREG(st.st_mode):
            if is_run_log(full):
                raise UsageError(f"{shown}: is a run log; refusing to write over it")
            if full.suffix.lower() in SOURCE_SUFFIXES:
                raise UsageError(f"{shown}: is a source file; refusing to write over it")
        try:  # opening for append changes nothing, not even the modification time
            os.close(os.open(full, os.O_WRONLY | os.O_APPEND))
        except OSError as exc:
            raise UsageError(f"{shown}: cannot write it: {_why(exc)}") from None
        return full
    if full.suffix.lower() in SOURCE_SUFFIXES:
        raise UsageError(f"{shown}: names a Python source file; choose another path")
    if not full.parent.is_dir():
        raise UsageError(f"{shown}: directory {one_line(full.parent)} does not exist")
    _probe_dir(full.parent, shown)
    return full


def output_dir(path: str | os.PathLike[str], flag: str) -> Path:
    """Create (if needed) a directory gradoc will write files in; return it absolute."""
    full = Path(os.path.abspath(path))
    shown = f"{flag} {one_line(os.fspath(path))}"
    if full.exists() and not full.is_dir():
        raise UsageError(f"{shown}: exists and is not a directory")
    try:
        full.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{shown}: cannot create the directory: {_why(exc)}") from None
    _probe_dir(full, shown)
    return full
