"""Run a Python script in this process exactly as ``python SCRIPT ARGS`` would."""

from __future__ import annotations

import runpy
import sys
import traceback
from pathlib import Path
from types import TracebackType

from .errors import UsageError
from .guard import GuardGaveUp

_SKIP = (str(Path(__file__).parent), runpy.__file__)


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


def exec_script(path: Path, args: list[str]) -> int:
    """Run the script as ``__main__``; return the exit code ``python`` would have returned.

    Exceptions from the script are printed as Python prints them (without gradoc's own
    frames) and turned into exit code 1; ``sys.exit`` keeps its code.
    """
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [str(path), *args]
    sys.path.insert(0, str(path if path.is_dir() else path.parent))
    try:
        runpy.run_path(str(path), run_name="__main__")
        return 0
    except SystemExit as exc:
        return _exit_code(exc.code)
    except KeyboardInterrupt:
        print("KeyboardInterrupt", file=sys.stderr)
        return 130
    except GuardGaveUp as exc:  # gradoc's own decision: its message, not a traceback
        print(exc, file=sys.stderr)
        return exc.exit_code
    except BaseException as exc:
        traceback.print_exception(type(exc), exc, _user_frames(exc.__traceback__))
        return 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        sys.stdout.flush()


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


class Stop(BaseException):
    """Raised from a hook to end a script early with what was captured (``run_until``)."""

    def __init__(self, payload: object) -> None:
        super().__init__("stopped by gradoc")
        self.payload = payload


def run_until(path: Path, args: list[str]) -> object | None:
    """Run the script as ``exec_script`` does until a hook raises :class:`Stop`; return its
    payload (None when the script ended first). Errors of the script propagate."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [str(path), *args]
    sys.path.insert(0, str(path if path.is_dir() else path.parent))
    try:
        runpy.run_path(str(path), run_name="__main__")
        return None
    except Stop as stop:
        return stop.payload
    except SystemExit:
        return None
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
