"""A copy of the script's folder to re-run it in, so that a re-run leaves the user's files as
they were.

``gradoc fix`` re-runs a script with a fix applied. The script writes what it always writes:
a checkpoint, a log, ``lightning_logs/``, a CSV of its metrics. Run in the user's folder, the
re-run would overwrite the first run's files with the fixed run's. It runs in a copy instead:
the folder the script's relative paths resolve from (the working directory when the script
lies under it, else the script's own folder) is copied to a temporary directory, the working
directory and the script are mapped into it, and the copy is removed afterwards. What the
script writes by an absolute path outside that folder still reaches it (the run's side
effects, ``runtime.effects``, see it). What the first run read by a relative path out of the
folder (``../data/names/*.txt``) is linked, not copied, at the same relative place, and kept
from any write while the copy runs (``effects.read_only``).

Not copied: Python's bytecode caches, version-control directories, virtual environments (a
folder holding ``pyvenv.cfg``), gradoc's run directories (a folder holding ``run.db``) and
its other working copies: none is the script's input; nor sockets and pipes, which a copy
cannot hold. A folder of more than :data:`COPY_MAX` bytes (a dataset kept next
to the script) is refused with the reason, before anything is copied.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import GradocError

COPY_MAX = 1 << 30
"""Bytes a copied folder may hold (1 GiB): copying more costs more than the re-run it
protects (a dataset kept next to the script), and a folder that large is refused."""

_SKIPPED = frozenset({"__pycache__", ".git", ".hg", ".svn", ".mypy_cache", ".pytest_cache"})


class CopyRefused(GradocError):
    """The script's folder cannot be copied for a re-run (too large, unreadable)."""


def copy_root(script: Path, cwd: Path) -> Path:
    """The folder a re-run needs: the working directory when the script lies under it (its
    relative paths resolve from there), else the script's folder."""
    script, cwd = script.resolve(), cwd.resolve()
    return cwd if script.is_relative_to(cwd) else script.parent


_PREFIX = "gradoc-copy-"
"""The temporary copies' names: one found in a folder being copied (a script in the temporary
directory itself) is never copied into itself."""


def _skipped(folder: str, names: list[str]) -> set[str]:
    """``shutil.copytree``'s ``ignore``: what is not the script's input, and what is not a
    file, a folder or a link (a socket, a pipe: nothing a copy can hold)."""
    out = {n for n in names if n in _SKIPPED or n.startswith(_PREFIX)}
    for n in names:
        path = os.path.join(folder, n)
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue  # gone since it was listed: copytree says so if it matters
        marked = stat.S_ISDIR(mode) and any(
            os.path.exists(os.path.join(path, mark)) for mark in ("run.db", "pyvenv.cfg")
        )
        if marked or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            out.add(n)
    return out


def _brief(exc: OSError | shutil.Error) -> str:
    """A copy's failure in a line: ``shutil.Error`` lists every file that failed."""
    if isinstance(exc, shutil.Error) and exc.args and isinstance(exc.args[0], list):
        failed = exc.args[0]
        first = failed[0][-1] if failed and isinstance(failed[0], tuple) else failed[:1]
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        return f"{first}{more}"
    return str(exc)


def folder_size(root: Path, limit: int = COPY_MAX) -> int:
    """The bytes :func:`working_copy` would copy from ``root``; it stops counting past
    ``limit`` (a huge folder is not walked to its end)."""
    total = 0
    for folder, dirs, files in os.walk(root):
        skip = _skipped(folder, dirs + files)
        dirs[:] = [d for d in dirs if d not in skip]
        for name in files:
            if name in skip:
                continue
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
            if total > limit:
                return total
    return total


@dataclass(frozen=True, slots=True)
class Copied:
    """A working copy: the folder copied, where its copy lies, and the script's copy."""

    root: Path
    dest: Path
    script: Path

    def of(self, path: Path) -> Path | None:
        """The copy of ``path``; None for a path outside the copied folder."""
        path = path.resolve()
        return self.dest / path.relative_to(self.root) if path.is_relative_to(self.root) else None


LINKED_MAX = 20_000
"""Files linked at most into a copy (the first run's reads outside its folder and their
folders' other files)."""


def _ups(root: Path, reads: list[Path]) -> int:
    """How many folders above ``root`` the files read lie (``../data``: 1)."""
    ups = 0
    for full in reads:
        parts = Path(os.path.relpath(full, root)).parts
        ups = max(ups, next((i for i, p in enumerate(parts) if p != ".."), len(parts)))
    return ups


def _link_reads(root: Path, dest: Path, reads: list[Path]) -> list[str]:
    """In the copy ``dest`` of ``root``, a link at the place of each file read outside
    ``root`` (``../data/names/Arabic.txt``), and of every other file of its folder (so that
    a glob there finds what it found); the files linked to (resolved), which stay read-only
    while the copy runs (``effects.read_only``)."""
    folders = dict.fromkeys(full.parent for full in reads)
    linked: list[str] = []
    for folder in folders:
        try:
            entries = [e for e in os.scandir(folder) if e.is_file()]
        except OSError:
            entries = []
        names = {e.name for e in entries} | {f.name for f in reads if f.parent == folder}
        place = Path(os.path.normpath(dest / os.path.relpath(folder, root)))
        place.mkdir(parents=True, exist_ok=True)
        for name in sorted(names):
            if len(linked) >= LINKED_MAX:
                raise CopyRefused(
                    f"the script reads more than {LINKED_MAX} files outside {root}: a copy "
                    "would link them all; give those paths absolute and try again"
                )
            target = folder / name
            if not os.path.lexists(place / name):
                os.symlink(target, place / name)
            linked.append(os.path.realpath(target))
    return linked


@contextlib.contextmanager
def working_copy(
    script: Path, cwd: Path, limit: int = COPY_MAX, reads: list[Path] | None = None
) -> Iterator[Copied]:
    """Copy the script's folder (:func:`copy_root`) to a temporary directory, change into
    the copy of ``cwd`` (the copy's root when ``cwd`` lies outside it) and yield the copy
    (its ``script``: the script's copy); on leaving, change back and remove the copy.

    ``reads``: files the first run read outside that folder by a relative path
    (``../data/names/*.txt``, ``effects.SideEffects.reads``). They are not copied: the copy
    is placed as deep in the temporary directory as they lie above the folder, with the
    folder's own name and its parents', and each (with the other files of its folder) is a
    link at its place there, to the user's file, which no write may reach while the copy
    runs (``effects.read_only``)."""
    from .effects import read_only

    script, cwd = script.resolve(), cwd.resolve()  # before the change of directory
    root = copy_root(script, cwd)
    reads = [Path(os.path.abspath(r)) for r in reads or []]
    ups = _ups(root, reads)
    if ups >= len(root.parts) - 1:
        raise CopyRefused(f"the script reads files above {root.anchor}: a copy cannot place them")
    size = folder_size(root, limit)
    if size > limit:
        raise CopyRefused(
            f"{root} holds more than {limit / 2**30:.3g} GiB; gradoc re-runs a script in a "
            "copy of its folder so that your files stay as they are: move the data out of "
            "the folder (read it by an absolute path) and try again"
        )
    tmp = Path(tempfile.mkdtemp(prefix=_PREFIX))
    saved = os.getcwd()
    try:
        dest = tmp.joinpath(*root.parts[len(root.parts) - 1 - ups :]) if root.name else tmp / "root"
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(root, dest, symlinks=True, ignore=_skipped)
            linked = _link_reads(root, dest, reads)
        except (OSError, shutil.Error) as exc:
            raise CopyRefused(
                f"could not copy {root} to re-run the script there: {_brief(exc)}"
            ) from exc
        os.chdir(dest / cwd.relative_to(root) if cwd.is_relative_to(root) else dest)
        with read_only(linked):
            yield Copied(root, dest, dest / script.relative_to(root))
    finally:
        os.chdir(saved)
        shutil.rmtree(tmp, ignore_errors=True)
