"""What a script did outside gradoc's run directory, seen through Python's audit hooks.

``gradoc run`` may re-run a script to find where a NaN was born; a re-run repeats every
side effect of the script up to that step: checkpoints rewritten (a resume checkpoint
set back by 60 steps), logs appended to twice, uploads sent again. So the first run is
watched with an audit hook (PEP 578), and the re-run happens by itself only when the
script wrote no file outside the run directory, removed or renamed none, made no
directory, opened no network connection and started no process, or when everything it
changed lies inside its own folder (:meth:`SideEffects.outside`): it then re-runs in a copy
of that folder (``runtime.workcopy``). Otherwise gradoc prints the command that replays it
(``gradoc replay RUN_DIR``) and leaves the choice to the user.

Seen: everything done through Python (``open``, ``os``, ``shutil``, ``socket``,
``subprocess``, ``sqlite3``; so ``numpy.save``, ``pickle``, logging to a file, HTTP
clients). ``torch.save(obj, path)`` writes from C++ (so do safetensors and h5py), which
no audit hook sees; for those, when the run ends, the working directories, the script's
directory and the directories of every file the script opened are scanned (a few levels
deep, a bounded number of entries) for files modified since the run began (a file saved
just before the run, the script itself, is not one: see :func:`_modified`). Not seen: a
C extension writing elsewhere without Python's help, and the work of processes the
script forks (a DataLoader worker's own writes). Python's bytecode cache
(``__pycache__``) and ``os.devnull`` do not count, nor does a process a library starts only
to read (``fc-list`` for matplotlib's font cache, ``nvidia-smi``, ``git describe``:
:data:`_READ_ONLY`).

An audit hook cannot be removed, so it is installed once, by ``gradoc run`` only, and
does nothing while no recorder is active; it costs one set lookup per audited event
(``builtins.id`` is the frequent one: ~1 µs each, ~1% of a 1 ms step).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import stat
import sys
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

from .._util.text import one_line

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_FILE_EVENTS = {
    "os.remove": "removed",
    "os.rmdir": "removed",
    "os.rename": "renamed",
    "os.mkdir": "created the directory",
    "os.truncate": "truncated",
    "os.link": "linked",
    "os.symlink": "linked",
    "os.chmod": "changed the mode of",
    "os.chown": "changed the owner of",
    "os.utime": "touched",
    "shutil.rmtree": "removed",
    "shutil.copyfile": "copied to",
    "shutil.move": "moved",
    "sqlite3.connect": "opened the database",
}
_NET_EVENTS = {"socket.connect", "socket.sendto", "socket.sendmsg", "socket.bind"}
_PROCESS_PIPE = "/pymp-"
"""A Unix socket in the temporary folder multiprocessing makes (``/tmp/pymp-xxxx/listener-...``):
its workers talking to the parent, not the network."""
_PROC_EVENTS = {"subprocess.Popen", "os.system", "os.exec", "os.spawn", "os.posix_spawn"}
_EVENTS = frozenset({"open", *_FILE_EVENTS, *_NET_EVENTS, *_PROC_EVENTS})
_READ_ONLY = {
    "fc-list": None,  # matplotlib builds its font cache from it (the cache is its own file)
    "fc-match": None,
    "nvidia-smi": None,  # GPU queries (pynvml-less libraries call it)
    "uname": None,
    "nproc": None,
    "lscpu": None,
    "hostname": None,
    "which": None,
    "ldconfig": {"-p"},  # the cache printed, not rebuilt
    "git": {"describe", "rev-parse", "status", "log", "show", "diff", "ls-files", "branch"},
}
"""Programs that libraries start to read something, and the subcommands or flags that only
read (None: any use reads): no side effect that forbids a re-run."""

SHOWN = 5
"""Side effects described (the rest are counted)."""
SCAN_DEPTH = 3
"""Levels below the working and script directories scanned for modified files."""
SCAN_ENTRIES = 20_000
"""Directory entries scanned at most (a large tree is scanned in part)."""
SCAN_DIRS = 64
"""Directories of opened files remembered for the scan."""
MAX_EFFECTS = 10_000
READS_KEPT = 5_000
"""Files read outside the script's folder kept in the run log (``meta['side_effects']
['reads']``), for a fix's copy to link: a script that read more is re-run in no copy."""
"""Side effects remembered (beyond, the count stops growing: the answer is the same)."""
_NOT_SCANNED = frozenset({"__pycache__", "node_modules", "site-packages", "gradoc-runs"})
CLOCK_SLACK_S = 0.05
"""Linux stamps files with a coarse clock (a tick, a few ms, behind ``time.time()``)."""
COARSE_SLACK_S = 2.0
"""File systems that keep whole seconds (FAT keeps two) stamp a write up to that early."""


def _modified(mtime_ns: int, since: float) -> bool:
    """Whether a file stamped ``mtime_ns`` was modified at or after ``since``.

    A file saved a moment before the run (the script, edited and run at once) must not
    count: fine-grained stamps are compared within the kernel clock's tick; only a stamp
    of whole seconds, which a coarse file system truncates, gets the coarse slack.
    """
    coarse = mtime_ns % 1_000_000_000 == 0
    return mtime_ns >= (since - (COARSE_SLACK_S if coarse else CLOCK_SLACK_S)) * 1e9


def _cache_dirs() -> list[str]:
    """Caches a re-run may fill again without harm: XDG's (``~/.cache``: Hugging Face,
    torch hub, matplotlib), PyTorch Inductor's and Triton's."""
    home = os.path.expanduser("~")
    dirs = [
        os.environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache"),
        os.environ.get("TRITON_CACHE_DIR") or os.path.join(home, ".triton"),
        os.environ.get("MPLCONFIGDIR") or os.path.join(home, ".config", "matplotlib"),
        os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        or os.path.join(tempfile.gettempdir(), f"torchinductor_{_user()}"),
    ]
    return [os.path.abspath(d) for d in dirs]


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name (a container without /etc/passwd entry)
        return "unknown"


def _identity(fd: int) -> tuple[int, int] | None:
    """(device, inode) of the regular file behind a file descriptor, if it is one."""
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


class SideEffects:
    """Records what the script does outside ``allowed`` (directories) while active.

    A file the script creates and removes again during the run (a temporary file) is no
    side effect; nor is a directory that already existed when it was "created", nor
    anything in a cache (:func:`_cache_dirs`).
    """

    def __init__(self, allowed: list[str | os.PathLike[str]]) -> None:
        self.allowed = [os.path.abspath(d) for d in allowed]
        self.caches = _cache_dirs()
        self.active = False
        self.dirs: dict[str, None] = {}
        """Directories of the files the script opened (scanned at the end)."""
        self._effects: dict[str, str] = {}  # what was changed -> how, for people
        # the files the process's own stdin/stdout/stderr are redirected to (`> log.txt`)
        self._own = {_identity(fd) for fd in (0, 1, 2)} - {None}
        self._created: set[str] = set()  # paths that did not exist before the run made them
        self.relative: dict[str, str] = {}
        """Files opened by a relative path (read or written): absolute -> as written. A copy
        of the script's folder reaches one that leaves it (``../data/train.csv``) only by a
        link (``runtime.workcopy``), and only one the script read."""
        self.written: set[str] = set()
        """Of those, the files opened for writing (absolute)."""

    @property
    def count(self) -> int:
        return len(self._effects)

    @property
    def seen(self) -> list[str]:
        return list(self._effects.values())[:SHOWN]

    def __enter__(self) -> SideEffects:
        global _recorder
        _install()
        _recorder, self.active = self, True
        return self

    def __exit__(self, *exc: object) -> None:
        global _recorder
        self.active = False
        if _recorder is self:
            _recorder = None

    def scan(self, since: float, roots: list[str]) -> None:
        """Files modified since ``since`` (a ``time.time()``) under ``roots`` and the
        directories of the files the script opened: writes no audit hook saw."""
        dirs = dict.fromkeys(os.path.abspath(r) for r in [*roots, *self.dirs])
        budget = [SCAN_ENTRIES]
        for d in dirs:
            self._scan(d, since, SCAN_DEPTH if d in roots else 0, budget)

    def _scan(self, directory: str, since: float, depth: int, budget: list[int]) -> None:
        if self._exempt(directory):
            return  # the run directory, a cache
        try:
            entries = list(os.scandir(directory))
        except OSError:
            return
        for e in entries:
            budget[0] -= 1
            if budget[0] < 0:
                return
            try:
                if e.is_dir(follow_symlinks=False):
                    if depth > 0 and not e.name.startswith(".") and e.name not in _NOT_SCANNED:
                        self._scan(e.path, since, depth - 1, budget)
                elif e.is_file(follow_symlinks=False):
                    st = e.stat()
                    if _modified(st.st_mtime_ns, since) and (st.st_dev, st.st_ino) not in self._own:
                        self._file(e.path, "wrote")
            except OSError:
                continue

    def outside(self, root: str | os.PathLike[str]) -> list[str]:
        """The side effects that reach outside ``root`` (a file written elsewhere, the
        network, a process), for people; what remains wrote under ``root`` only, which a
        copy of ``root`` can take (``runtime.workcopy``)."""
        base = os.path.abspath(root)
        return [
            what
            for key, what in self._effects.items()
            if not (os.path.isabs(key) and _within(key, base))
        ]

    def summary(self) -> str:
        """One line for people: 'wrote checkpoints/latest.pt, used the network (...)'."""
        more = self.count - len(self.seen)
        return ", ".join(self.seen) + (f" (and {more} more)" if more > 0 else "")

    def _note(self, key: str, what: str) -> None:
        if key not in self._effects and len(self._effects) < MAX_EFFECTS:
            self._effects[key] = what

    def _file(self, path: Any, how: str) -> None:
        """A change to a file or directory: noted unless exempt or undone (see the class)."""
        full = self._outside(path)
        if full is None:
            return
        exists = os.path.lexists(full)  # NOTE: audit events come before the operation
        if how == "removed" and full in self._created:
            self._created.discard(full)  # made and removed during the run: nothing left
            self._effects.pop(full, None)
            return
        if how == "created the directory" and exists:
            return  # os.makedirs(..., exist_ok=True) of a directory already there
        if how in ("wrote", "created the directory") and not exists:
            self._created.add(full)
        self._note(full, f"{how} {one_line(full)}")

    def _exempt(self, full: str) -> bool:
        return any(_within(full, d) for d in (*self.allowed, *self.caches))

    def _outside(self, path: Any) -> str | None:
        """``path`` (absolute) when a change to it is a side effect, else None."""
        if isinstance(path, int) or path is None:  # a file descriptor: opened elsewhere
            return None
        try:
            full = os.path.abspath(os.fsdecode(path))
        except (TypeError, ValueError):
            return "<a path>"
        if full == os.devnull or f"{os.sep}__pycache__{os.sep}" in full:
            return None
        if full.endswith(f"{os.sep}:memory:"):  # sqlite3.connect(":memory:")
            return None
        return None if self._exempt(full) else full

    def escaping(self, root: str | os.PathLike[str]) -> list[str]:
        """The files opened by a relative path that leads out of ``root``, as written."""
        base = os.path.abspath(root)
        return [written for full, written in self.relative.items() if not _within(full, base)]

    def reads(self, root: str | os.PathLike[str]) -> list[list[str]]:
        """Of :meth:`escaping`, the files the script only read, each ``[as written,
        absolute]``: what a copy of ``root`` reaches by a link (``runtime.workcopy``)."""
        base = os.path.abspath(root)
        return [
            [written, full]
            for full, written in self.relative.items()
            if not _within(full, base) and full not in self.written and os.path.isfile(full)
        ]

    def _event(self, event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            path, mode, flags = (*args, None, None, None)[:3]
            if isinstance(path, (str, bytes)) and len(self.relative) < MAX_EFFECTS:
                written = os.fsdecode(path)
                if written and not os.path.isabs(written) and written != os.devnull:
                    self.relative.setdefault(os.path.abspath(written), written)
            writes = (
                any(c in mode for c in "wax+")
                if isinstance(mode, str)
                else isinstance(flags, int) and bool(flags & _WRITE_FLAGS)
            )
            if writes and isinstance(path, (str, bytes)):
                self.written.add(os.path.abspath(os.fsdecode(path)))
            if writes:
                self._file(path, "wrote")
            full = self._outside(path)
            if full is not None and len(self.dirs) < SCAN_DIRS:
                self.dirs[os.path.dirname(full)] = None
        elif event in _FILE_EVENTS:
            paths = [a for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))]
            if event == "os.rename" and len(paths) == 2:
                src = self._outside(paths[0])
                if src is not None and src in self._created:  # a temporary file moved into
                    self._created.discard(src)  # place: what is left is the destination
                    self._effects.pop(src, None)
                    self._file(paths[1], "wrote")
                    return
            elif event != "os.rename":  # rename(src, dst): both count; others: the first
                paths = paths[:1]
            for p in paths:
                self._file(p, _FILE_EVENTS[event])
        elif event in _NET_EVENTS:
            address = one_line(args[1] if len(args) > 1 else "?")
            if _PROCESS_PIPE in address:
                return  # multiprocessing's own socket between processes (DataLoader workers)
            self._note(f"net:{address}", f"used the network ({address})")
        else:
            argv = _argv(event, args)
            if argv and _reads_only(argv):
                return
            what = args[0] if args else event
            name = one_line(os.fsdecode(what) if isinstance(what, bytes) else what)
            self._note(f"proc:{name}", f"started a process ({name})")


def _within(path: str, base: str) -> bool:
    """``path`` is ``base`` or lies under it (both absolute)."""
    return path == base or path.startswith(base + os.sep)


def _argv(event: str, args: tuple[Any, ...]) -> list[str]:
    """The command line a process event starts, as words (empty when it cannot be read)."""
    raw: Any = args[0] if event == "os.system" else (args[1] if len(args) > 1 else None)
    if raw is None and args:
        raw = args[0]
    if isinstance(raw, (str, bytes)):
        return os.fsdecode(raw).split()
    if isinstance(raw, (list, tuple)):
        return [os.fsdecode(a) if isinstance(a, (str, bytes, os.PathLike)) else str(a) for a in raw]
    return []


def _reads_only(argv: list[str]) -> bool:
    """A read-only program of :data:`_READ_ONLY`, used in a way that only reads."""
    program = os.path.basename(argv[0])
    if program not in _READ_ONLY:
        return False
    allowed = _READ_ONLY[program]
    return allowed is None or (len(argv) > 1 and argv[1] in allowed)


_recorder: SideEffects | None = None
_installed = False
_busy = threading.local()


_protected: set[str] = set()
"""The user's files a working copy links to (``runtime.workcopy``): read-only while linked."""
_THROUGH = {"os.truncate": 0, "os.chmod": 0, "os.chown": 0, "os.utime": 0, "shutil.copyfile": 1}
"""Events that change the file a link points to, and which argument names it."""


@contextlib.contextmanager
def read_only(paths: list[str]) -> Iterator[None]:
    """While inside, a write to any of ``paths`` (absolute, resolved) by the process, through
    a link or not, fails with ``PermissionError``: a re-run in a copy reads the user's files
    it links to and never changes them."""
    _install()
    added = set(paths) - _protected
    _protected.update(added)
    try:
        yield
    finally:
        _protected.difference_update(added)


def _changes_protected(event: str, args: tuple[Any, ...]) -> str | None:
    """The protected file ``event`` would change, else None."""
    if event == "open":
        path, mode, flags = (*args, None, None, None)[:3]
        writes = (
            any(c in mode for c in "wax+")
            if isinstance(mode, str)
            else isinstance(flags, int) and bool(flags & _WRITE_FLAGS)
        )
        target = path if writes else None
    else:
        at = _THROUGH.get(event)
        target = args[at] if at is not None and len(args) > at else None
    if not isinstance(target, (str, bytes, os.PathLike)):
        return None
    full = os.path.realpath(os.fsdecode(target))
    return full if full in _protected else None


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _protected and (event == "open" or event in _THROUGH):
        changed = _changes_protected(event, args)
        if changed is not None:
            raise PermissionError(
                f"gradoc: {changed} is your file, linked read-only into the copy a fix re-runs "
                "in: the first run only read it"
            )
    if event in _EVENTS:  # NOTE: the first thing, and cheap: every audited event comes here
        recorder = _recorder
        if recorder is not None and recorder.active and not getattr(_busy, "on", False):
            _busy.on = True  # our own work must not recurse into the hook
            try:
                recorder._event(event, args)
            except Exception:  # a recorder must never break the user's program
                recorder._note("?", "did something gradoc could not describe")
            finally:
                _busy.on = False


def _install() -> None:
    global _installed
    if not _installed:
        sys.addaudithook(_audit)
        _installed = True
