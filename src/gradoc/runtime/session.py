"""``gradoc run``'s runtime: a script run watched, its report, the re-run that locates a NaN
it did not locate, and ``gradoc fix``'s re-run with a no-code fix. ``cli`` parses the
command line and calls these.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from signal import SIGINT
from typing import Any

from .._util.json_types import JsonObject
from .._util.text import one_line
from ..analysis import Report


@dataclass(frozen=True)
class Replay:
    """How ``gradoc run`` may re-run the script to locate a NaN it did not locate."""

    budget: float
    """Seconds the re-run may take; 0: never re-run, say how to."""
    asked: bool = False
    """``--replay``: re-run even when the script has side effects outside its run directory."""


def after_run(work: Callable[[], Any], what: str) -> Any:
    """Work after the user's script ended: a failure is one line and keeps its exit code."""
    try:
        return work()
    except KeyboardInterrupt:
        print(f"gradoc: interrupted; did not {what}", file=sys.stderr)
    except Exception as exc:
        if os.environ.get("GRADOC_DEBUG"):
            raise
        print(f"gradoc: could not {what}: {type(exc).__name__}: {one_line(exc)}", file=sys.stderr)
    return None


def execute(
    script: Path,
    script_args: list[str],
    out: Path,
    json_path: Path | None,
    guard: Any,
    lr_scale: float,
    checks: Sequence[str] = (),
    replay: Replay | None = None,
    sample_every: int | None = None,
    resume: bool = False,
    grads_every: int | None = None,
    limit_s: float | None = None,
    rerun: bool = False,
) -> tuple[int, Report | None]:
    """Run the script watched into ``out``; return its exit code and the report.
    ``checks``: ``gradoc run --check`` names; ``sample_every``: ``--sample-every`` (None:
    the budgeted default); ``grads_every``: ``--grads-every`` (None: every step, or the
    lean cadence on short steps); ``resume``: continue the log in ``out`` (``--resume``);
    ``limit_s``: interrupt the script after that long, as Ctrl-C would (a fix's re-run);
    ``rerun``: a fix's re-run, one of several in this process (its own modules are imported
    afresh by the next);
    ``replay``: whether and how long to re-run
    the script to locate a NaN that was not located (None: never)."""
    from ..collect.auto import AutoAttach
    from ..collect.run import Run
    from ..config import WatchConfig
    from ..schedule import every
    from .effects import READS_KEPT, SHOWN, SideEffects
    from .finish import finish_run
    from .replay import script_digest, seed_everything
    from .runner import exec_script, scan_output
    from .workcopy import copy_root

    config = WatchConfig(guard=guard, check_amp="amp" in checks, check_padding="padding" in checks)
    if sample_every is not None:  # fixed by hand: no budget
        config.params = config.activations = every(sample_every)
    if grads_every is not None:
        config.grads = every(grads_every)
    written: list[Report] = []  # the typed report, kept: close() returns its JSON form

    def finish(*args: Any) -> JsonObject:
        written.append(finish_run(*args))
        return written[-1].to_json()

    run = Run(out, config, script=str(script), lr_scale=lr_scale, finish=finish, resume=resume)
    cwd, started = os.getcwd(), time.time()
    run.set_meta(
        launch={
            "script": os.path.abspath(script),
            "args": script_args,
            "cwd": cwd,
            "sha256": script_digest(script),
        }
    )
    auto = AutoAttach(run)
    effects = SideEffects([out, *([json_path] if json_path else [])])  # gradoc's own files
    clues: list[str] = []
    printed: list[str] = []
    printed_at: list[tuple[int, str]] = []  # the last line that showed a NaN/Inf, its step
    seed_everything()  # so that a replay can repeat the run exactly (the script's seeds win)
    scan = scan_output(printed, printed_at, step=lambda: run.step)
    with effects, _numerics(run, "numerics" in checks), scan, _interrupted_after(limit_s):
        code = exec_script(script, script_args, clues, forget=rerun)
    auto.remove()
    root = copy_root(script, Path(cwd))  # what a re-run in a copy could not reach
    status = "finished" if code == 0 else ("interrupted" if code == -SIGINT else "failed")
    if run.guard is not None and run.guard.gave_up:
        status = "gave_up"
    run.set_meta(
        exit_clues=clues,
        printed_nonfinite=printed,
        printed_nonfinite_last=(
            {"step": printed_at[0][0], "text": printed_at[0][1]} if printed_at else None
        ),
        side_effects={
            "count": effects.count,
            "seen": effects.seen,
            "outside": effects.outside(root)[:SHOWN],
            "escapes": effects.escaping(root)[:SHOWN],
            "reads": effects.reads(root)[:READS_KEPT],
        },
    )
    try:
        closed = run.close(status=status, exit_code=code, json_path=json_path)
    except KeyboardInterrupt:  # a second Ctrl-C: the log is complete, close said so
        return code or -SIGINT, None
    report = written[-1] if closed is not None and written else None
    if report is not None and replay is not None:
        replayed = after_run(
            lambda: _replay_if_needed(
                out, script, script_args, cwd, started, code, clues, effects, json_path, replay
            ),
            "re-run the script to locate the NaN",
        )
        report = replayed or report
    return code, report


@contextlib.contextmanager
def _numerics(run: Any, on: bool) -> Iterator[None]:
    """``--check numerics``: every op of the program checked; the first birth is the run's
    origin (the run's own replays are not needed then)."""
    if not on:
        yield
        return
    from ..locate.numerics import CheckNumerics

    def found(origin: Any) -> None:
        origin.step = run.step
        run.locator.done = True  # located: no replay of this step needed

    check = CheckNumerics(run.module_names, raise_error=False, on_found=found)
    run.set_meta(check_numerics=True)
    try:
        with check:
            yield
    finally:
        if check.origin is not None:
            check.origin.note = "found by --check numerics: every operation's output checked"
            run.record_origin(check.origin)


@contextlib.contextmanager
def _interrupted_after(limit_s: float | None) -> Iterator[None]:
    """Interrupt the main thread after ``limit_s`` seconds, as Ctrl-C would (the script ends
    by KeyboardInterrupt, told as "interrupted"); the timer stops when the script ends."""
    if limit_s is None:
        yield
        return
    import _thread
    import threading

    timer = threading.Timer(limit_s, _thread.interrupt_main)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _replay_if_needed(
    out: Path,
    script: Path,
    script_args: list[str],
    cwd: str,
    started: float,
    code: int,
    clues: list[str],
    effects: Any,
    json_path: Path | None,
    options: Replay,
) -> Report | None:
    """Re-run the script up to a non-finite step that was not located, when that is safe
    (see gradoc.runtime.replay and gradoc.runtime.effects); else say how to. Returns the new
    report."""
    from ..report import write_report
    from ..store import open_run
    from .replay import not_replayable, replay, unlocated_step
    from .workcopy import CopyRefused, copy_root, working_copy

    with open_run(out) as log:
        step = unlocated_step(log.events, log.meta, code, clues)
        whole = not log.meta.steps
        why_not = None if step is None else not_replayable(log.meta, step)
    if step is None:
        return None
    if why_not is not None:
        print(
            f"gradoc: where the NaN/Inf of step {step} was born is not known; {why_not}",
            file=sys.stderr,
        )
        return None
    command = f"gradoc replay {shell(out)}"
    if options.budget == 0:
        print(
            f"gradoc: where the NaN/Inf of step {step} was born is not known; {command} "
            "re-runs the script to find it",
            file=sys.stderr,
        )
        return None
    effects.scan(started, [cwd, os.getcwd(), str(script.absolute().parent)])
    root = copy_root(script, Path(cwd))
    outside = effects.outside(root)
    reads = effects.reads(root)  # read above the folder: a copy links them
    linked = {r[0] for r in reads}
    escapes = [e for e in effects.escaping(root) if e not in linked]  # a copy cannot take them
    copied = bool(effects.count) and not outside and not escapes  # in its folder: a copy's
    if outside and not options.asked:
        more = f" (and {len(outside) - 3} more)" if len(outside) > 3 else ""
        why = f"the script {', '.join(outside[:3])}{more} (outside {one_line(root)}), and a "
        _declined(out, script, step, command, why + "re-run would do that again")
        return None
    if effects.count and escapes and not options.asked:
        why = f"the script opens {', '.join(escapes[:3])} by a relative path that leaves "
        _declined(out, script, step, command, why + f"{one_line(root)}, so a copy cannot re-run it")
        return None
    how = "with every operation checked" if whole else f"up to step {step}"
    where = (
        f" in a copy of {one_line(root)} (it {effects.summary()} there; your files stay as "
        "they are)"
        if copied
        else ""
    )
    print(
        f"gradoc: re-running {one_line(script.name)} {how}{where} to find where the NaN was "
        f"born (at most {options.budget:g} s; --replay-budget 0 turns this off)",
        file=sys.stderr,
    )
    if not copied:
        replay(out, script, script_args, cwd, step, options.budget, whole)
        return write_report(out, json_path)
    out = out.resolve()
    try:
        with working_copy(script, Path(cwd), reads=[Path(r[1]) for r in reads]) as copy:
            moved = (str(copy.dest), str(copy.root))
            replay(out, copy.script, script_args, os.getcwd(), step, options.budget, whole, moved)
    except CopyRefused as exc:
        _declined(out, script, step, command, str(exc))
        return None
    return write_report(out, json_path)


def _declined(out: Path, script: Path, step: int, command: str, why: str) -> None:
    """Say, and log, that the script is not re-run to find where its NaN/Inf was born."""
    from ..store.writer import append_event

    message = (
        f"not re-running {one_line(script.name)} to find where the NaN/Inf of step {step} "
        f"was born: {why}"
    )
    print(f"gradoc: {message}. To re-run it up to step {step}: {command}", file=sys.stderr)
    append_event(out / "run.db", step, "replay_declined", message, {"command": command})


def shell(path: Path) -> str:
    """A path as the user would type it (relative when below the working directory)."""
    import shlex

    try:
        rel = os.path.relpath(path)
        shown = rel if not rel.startswith("..") else str(path)
    except ValueError:
        shown = str(path)
    return shlex.quote(one_line(shown))
