"""Run a Python script in this process exactly as ``python SCRIPT ARGS`` would."""

from __future__ import annotations

import builtins
import contextlib
import importlib.machinery
import math
import os
import re
import runpy
import signal
import sys
import sysconfig
import traceback
import types
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import torch

from .._util.text import one_line
from ..errors import GradocError, UsageError
from ..guard import GuardGaveUp

# gradoc's and runpy's frames sit above the script's; runpy is frozen since Python 3.11, so
# its frames are named "<frozen runpy>"
_SKIP = (str(Path(__file__).parent), runpy.__file__, "<frozen runpy>")


def check_script(script: str) -> Path:
    """Refuse a missing file or one with a syntax error before anything starts."""
    path = Path(script)
    if not path.exists():
        raise UsageError(f"script not found: {script}")
    if path.is_dir():
        if not (path / "__main__.py").exists():
            raise UsageError(f"{script} is a directory without __main__.py")
        source_path = path / "__main__.py"
    else:
        source_path = path
    try:
        source = source_path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {script}: {exc.strerror or exc}") from None
    try:
        compile(source, str(source_path), "exec")
    except SyntaxError as exc:
        raise UsageError(
            f"cannot run {script}: {exc.msg} ({exc.filename}, line {exc.lineno})"
        ) from None
    except ValueError as exc:  # e.g. source with null bytes
        raise UsageError(f"cannot run {script}: {exc}") from None
    return path


def _user_frames(tb: TracebackType | None) -> TracebackType | None:
    """Drop the frames of gradoc and runpy that sit above the user's script."""
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_SKIP):
        tb = tb.tb_next
    return tb


def _enter(path: Path, args: list[str]) -> str:
    """Set ``sys.argv`` and ``sys.path`` as ``python SCRIPT ARGS`` does; return the path to
    run: absolute, so ``__file__`` is absolute as under ``python`` (3.9+) and stays right
    after the script changes directory."""
    sys.argv = [str(path), *args]
    full = os.path.abspath(path)
    # python puts the script's directory first, symbolic links resolved (a directory with
    # __main__.py: the directory itself)
    sys.path.insert(0, full if path.is_dir() else os.path.dirname(os.path.realpath(path)))
    return full


def run_main(full: str) -> None:
    """Run the script at ``full`` (absolute) as ``__main__``, as ``python SCRIPT`` does:
    ``__file__`` absolute, ``sys.argv[0]`` left as the command line gave it (runpy sets it to
    the path it runs: a program that logs its command line wrote another one under gradoc).
    A directory or a zip with ``__main__.py`` is run by runpy, whose ``sys.argv[0]`` python
    also shows absolute there."""
    if os.path.isdir(full) or zipfile.is_zipfile(full):
        runpy.run_path(full, run_name="__main__")
        return
    with open(full, "rb") as f:
        code = compile(f.read(), full, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=full,
        __cached__=None,
        __loader__=importlib.machinery.SourceFileLoader("__main__", full),
        __builtins__=builtins,
    )
    saved = sys.modules["__main__"]
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        sys.modules["__main__"] = saved


def exec_script(
    path: Path, args: list[str], clues: list[str] | None = None, forget: bool = False
) -> int:
    """Run the script as ``__main__``; return the exit code ``python`` would have returned
    (-2: it ended by an uncaught KeyboardInterrupt, of which python dies by SIGINT).

    Exceptions from the script are printed as Python prints them (without gradoc's own
    frames) and turned into exit code 1; ``sys.exit`` keeps its code. When the script ends
    by an exception (``sys.exit`` included), what suggests a non-finite value made it stop
    is appended to ``clues`` (see :func:`nonfinite_clues`). ``forget``: the script's own
    modules it imported are taken out of ``sys.modules`` after it (:func:`_forget`).
    """
    saved_argv, saved_path, loaded = sys.argv[:], sys.path[:], set(sys.modules)
    roots = {str(path.resolve().parent), os.getcwd()}
    full = _enter(path, args)
    try:
        run_main(full)
        return 0
    except SystemExit as exc:
        _gather(clues, exc)
        return _exit_code(exc.code)
    except KeyboardInterrupt:  # python ends by SIGINT then: so does gradoc run, at its end
        print("KeyboardInterrupt", file=sys.stderr)
        return -signal.SIGINT
    except GuardGaveUp as exc:  # gradoc's own decision: its message, not a traceback
        print(exc, file=sys.stderr)
        return exc.exit_code
    except BaseException as exc:
        _uncaught(exc)
        _gather(clues, exc)
        return 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        if forget:
            _forget(loaded, roots)
        sys.stdout.flush()


def _forget(loaded: set[str], roots: set[str]) -> None:
    """The script's own modules imported by this run (files under its folder or the working
    directory) taken out of ``sys.modules``: a second script run in the same process (``gradoc
    fix``'s next re-run, in another copy) imports its own files, not the first copy's."""
    installed = {os.path.abspath(p) for p in (sys.prefix, sys.base_prefix, _GRADOC)}
    for name in set(sys.modules) - loaded:
        file = getattr(sys.modules.get(name), "__file__", None)
        if not isinstance(file, str) or "site-packages" in file:
            continue  # a library's (a virtual environment inside the project included)
        full = os.path.abspath(file)
        if any(_under(full, root) for root in roots) and not any(
            _under(full, p) for p in installed
        ):
            del sys.modules[name]


_GRADOC = str(Path(__file__).resolve().parents[1])


def _under(path: str, root: str) -> bool:
    return os.path.commonpath([path, root]) == root


_NONFINITE = re.compile(r"\b(nan|[+-]?inf|infinity|infinite|non-?finite|not finite)\b", re.I)
_NOT_USER = (
    str(Path(__file__).parent),
    str(Path(torch.__file__).parent),
    sysconfig.get_paths()["stdlib"],
    "<",
)


def _gather(clues: list[str] | None, exc: BaseException) -> None:
    if clues is not None:
        with contextlib.suppress(Exception):  # a clue is a nicety; the exit code is not
            clues += nonfinite_clues(exc)


def nonfinite_clues(exc: BaseException) -> list[str]:
    """What says that a script stopped because of a NaN/Inf: the exception's message
    (``raise ValueError("loss is nan")``, ``sys.exit("inf loss")``) or a scalar the script's
    own frames held when it stopped (``loss`` = nan). An ordinary error has none, and then
    gradoc never re-runs the script looking for a NaN."""
    found = []
    text = str(exc.code if isinstance(exc, SystemExit) else exc)
    if text and _NONFINITE.search(text):
        found.append(f"the script stopped with {type(exc).__name__}: {one_line(text)[:120]}")
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if not frame.f_code.co_filename.startswith(_NOT_USER):
            where = f"{frame.f_code.co_filename}:{tb.tb_lineno}"
            for name, value in list(frame.f_locals.items()):
                if _nonfinite_scalar(value):
                    found.append(f"`{one_line(name)}` was {_show(value)} at {one_line(where)}")
        tb = tb.tb_next
    return found[:5]


def _nonfinite_scalar(value: object) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.is_floating_point():
        try:
            return not bool(torch.isfinite(value.detach()).all())  # a host read, at exit only
        except Exception:  # meta or fake tensors hold no value
            return False
    return False


def _show(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor({value.detach().reshape(()).item()})"
    return repr(value)


def _uncaught(exc: BaseException) -> None:
    """What python does with an exception nothing caught: ``sys.excepthook`` (the program's
    own, when it set one) is handed it, without gradoc's frames; a hook that fails is said
    as python says it."""
    tb = _user_frames(exc.__traceback__)
    hook = sys.excepthook
    if hook is sys.__excepthook__:
        traceback.print_exception(type(exc), exc, tb)
        return
    try:
        hook(type(exc), exc, tb)
    except Exception as failed:
        print("Error in sys.excepthook:", file=sys.stderr)
        traceback.print_exception(type(failed), failed, failed.__traceback__)
        print("\nOriginal exception was:", file=sys.stderr)
        traceback.print_exception(type(exc), exc, tb)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


class _Scanned:
    """A stream as it was, whose writes are also read for a non-finite value (``loss nan``):
    the first such line is kept, and the last one with its step (``step()`` then)."""

    def __init__(
        self,
        stream: Any,
        found: list[str],
        last: list[tuple[int, str]],
        step: Callable[[], int] | None,
    ) -> None:
        self._stream = stream
        self._found, self._last, self._step = found, last, step

    def write(self, text: Any) -> Any:
        wanted = self._step is not None or not self._found
        if wanted and isinstance(text, str) and _NONFINITE.search(text):
            if not self._found:
                self._found.append(one_line(text.strip())[:160])
            if self._step is not None:
                self._last[:] = [(self._step(), one_line(text.strip())[:160])]
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def scan_output(
    found: list[str],
    last: list[tuple[int, str]] | None = None,
    step: Callable[[], int] | None = None,
) -> Iterator[None]:
    """While the script runs, note the first line it prints (stdout or stderr) that shows
    a NaN/Inf: a program that made no training step gradoc could count can still have
    printed one (``gradoc run`` then re-runs it with every operation checked). A stream
    the script replaced is left as the script left it."""
    saved = sys.stdout, sys.stderr
    last = last if last is not None else []
    sys.stdout = _Scanned(saved[0], found, last, step)
    sys.stderr = _Scanned(saved[1], found, last, step)
    try:
        yield
    finally:
        if isinstance(sys.stdout, _Scanned):
            sys.stdout = saved[0]
        if isinstance(sys.stderr, _Scanned):
            sys.stderr = saved[1]


class Stop(BaseException):
    """Raised from a hook to end a script early with what was captured (``run_until``)."""

    def __init__(self, payload: object) -> None:
        super().__init__("stopped by gradoc")
        self.payload = payload


class ScriptFailed(GradocError):
    """The user's script raised (its traceback is printed as Python prints it)."""


def run_until(path: Path, args: list[str]) -> object | None:
    """Run the script as ``exec_script`` does until a hook raises :class:`Stop`; return its
    payload (None when the script ended first). When the script raises, its traceback is
    printed as ``python`` prints it and :class:`ScriptFailed` says so in one line: the
    user's error is not gradoc's."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    full = _enter(path, args)
    try:
        run_main(full)
        return None
    except Stop as stop:
        return stop.payload
    except SystemExit:
        return None
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        traceback.print_exception(type(exc), exc, _user_frames(exc.__traceback__))
        raise ScriptFailed(
            f"{one_line(path)} raised {type(exc).__name__}: {one_line(exc)[:200]}"
        ) from None
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
