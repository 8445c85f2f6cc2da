"""``gradoc run``'s runtime: a script run watched, its report, the re-run that locates a NaN
it did not locate, and ``gradoc fix``'s re-run with a no-code fix. ``cli`` parses the
command line and calls these.
"""

from __future__ import annotations

import contextlib
import functools
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
) -> tuple[int, Report | None]:
    """Run the script watched into ``out``; return its exit code and the report.
    ``checks``: ``gradoc run --check`` names; ``sample_every``: ``--sample-every`` (None:
    the budgeted default); ``grads_every``: ``--grads-every`` (None: every step, or the
    lean cadence on short steps); ``resume``: continue the log in ``out`` (``--resume``);
    ``limit_s``: interrupt the script after that long, as Ctrl-C would (a fix's re-run);
    ``replay``: whether and how long to re-run
    the script to locate a NaN that was not located (None: never)."""
    from ..collect.auto import AutoAttach
    from ..collect.run import Run
    from ..config import WatchConfig
    from ..schedule import every
    from .effects import SHOWN, SideEffects
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
        code = exec_script(script, script_args, clues)
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


def fix(
    before: Path,
    report: Report,
    script: Path,
    script_args: list[str],
    out: str | None,
    json_path: Path | None,
    write: bool = False,
) -> int:
    """Re-run the script with the top fix of ``report`` in a copy of its folder
    (``workcopy``: the user's files stay as they are), print before/after. The fix is the
    most serious finding's: an edit of the user's code where gradoc writes one (``fix.patch``:
    made in the copy, judged by :func:`~gradoc.fix.compare.verdict`, and on ``write`` and a
    verified verdict made in the user's file too), else a remedy applied without a code change.
    A learning rate is first scaled without a code change; where the finding stays (an
    optimizer that keeps its own copy of the rate), the same scale is then tried as an edit
    where the optimizer is made.
    """
    from rich.console import Console

    from ..fix import choose, code_fixes
    from ..fix.patch import edit_for
    from ..fix.remedy import scaled_lr_flags, user_sources
    from ..report import print_comparison

    console = Console(stderr=True)
    sources = user_sources(script)
    meta = _meta(before)
    remedy, edit = choose(report), edit_for(report.serious, meta, sources)
    fixes = code_fixes(report, sources)
    if report.status == "healthy":
        console.print("gradoc fix: the run is healthy; nothing to fix")
        return 0
    if (
        edit is not None
        and remedy is not None
        and _rank(report, remedy.finding) < _rank(report, edit.finding)
    ):
        edit = None  # a more serious finding's remedy comes first
    if remedy is None and edit is None:
        console.print("gradoc fix: every fix of this diagnosis needs a code change:")
        print_comparison(None, None, fixes, console)
        return 0
    attempt = functools.partial(
        _attempt, before, report, meta, script, script_args, json_path, fixes, console
    )
    if (
        remedy is not None
        and (edit is None or _writes_remedy(edit, remedy))  # the remedy comes first
        and remedy.kind == "lr_scale"
        and scaled_lr_flags(script_args, 1.0)
    ):
        return _by_flags(attempt, out, remedy, script_args, console)  # the command's own knob
    if edit is not None and remedy is not None and _writes_remedy(edit, remedy):
        code, result = attempt(out, None, remedy)  # no code change first
        if result is None or not _too_high(result, remedy.finding):
            return code
        if _first_update_scaled(result):  # the scale took hold: the rate is still too high
            factor = remedy.lr_scale * LOWER_AGAIN
            edit = _rate_edit(report, meta, remedy.finding, factor) or edit
            console.print(
                f"gradoc fix: still too high at x{remedy.lr_scale:g}; x{factor:g}, written where "
                "the optimizer is made:"
            )
        else:  # its first update was the first run's: the scale came late, or never
            console.print(
                "gradoc fix: the scale did not reach the optimizer's first update (its loss "
                "after it was the first run's); the same scale, written where it is made:"
            )
        out = None
    elif edit is None:
        return attempt(out, None, remedy)[0]
    code, result = attempt(out, edit, None)
    again = _lower_again(edit, result, report, meta)
    if again is not None:
        first, lower = again[1] / LOWER_AGAIN, again[1]
        console.print(f"gradoc fix: the rate x{first:g} did not cure it; one try more, x{lower:g}:")
        edit = again[0]
        code, result = attempt(None, edit, None)
    if result is None:
        return code
    return _said_verdict(edit, result.verdict, result.why_not, write, console)


FLAG_TRIES = 3
"""A learning rate set by the command's flags is tried at the diagnosis' scale, then 10x and
100x lower while it is still too high (a rate raised 1000x needs the third)."""


def _by_flags(attempt: Any, out: str | None, remedy: Any, args: list[str], console: Any) -> int:
    """The learning rate scaled where the command sets it (``--learning_rate=0.1``): the
    program's own knob, which reaches a rate it sets each step from its flags (nanoGPT's
    schedule) as gradoc's scale of the optimizer cannot; lower while it is still too high."""
    from ..fix.remedy import Remedy, scaled_lr_flags

    code: int = 0
    factor = remedy.lr_scale
    for i in range(FLAG_TRIES):
        scaled = scaled_lr_flags(args, factor)
        assert scaled is not None
        new_args, changed = scaled
        flags = Remedy("lr_flags", factor, remedy.finding, " ".join(changed))
        code, result = attempt(out, None, flags, new_args)
        if result is None or not _too_high(result, remedy.finding) or i == FLAG_TRIES - 1:
            return code
        console.print(
            f"gradoc fix: the rate x{factor:g} did not cure it; x{factor * LOWER_AGAIN:g}:"
        )
        factor, out = factor * LOWER_AGAIN, None
    return code


LOWER_AGAIN = 0.1
"""A learning-rate edit that left the blow-up is tried once more, this much lower again (a rate
raised 100x needs more than the tenth the diagnosis asks for first)."""

_STILL_TOO_HIGH = frozenset(
    {"loss_blowup", "loss_divergence", "loss_spike", "large_updates", "exploding_gradients"}
)


def _first_update_scaled(result: Any) -> bool:
    """The no-code scale reached the optimizer's first update: the loss after it differs from
    the first run's (the runs are seeded alike). LBFGS's first step ran its inner iterations
    at the unscaled rate (``tests/shapes/lbfgs_lr80.py``): the same scale written where the
    optimizer is made is its fix, where a scale that took hold and left the rate too high
    calls for 10x lower."""
    before, after = result.before.loss, result.after.loss
    return len(before) > 1 and len(after) > 1 and before[1] != after[1]


def _too_high(result: Any, kind: str) -> bool:
    """The re-run still shows the finding a lower rate was for, or another of a rate too high
    (a divergence that became a blow-up)."""
    return any(f.kind == kind or f.kind in _STILL_TOO_HIGH for f in result.remaining + result.new)


def _lower_again(edit: Any, result: Any, report: Report, meta: Any) -> tuple[Any, float] | None:
    """The learning-rate edit scaled :data:`LOWER_AGAIN` further, and its factor, when the
    first did not help because the rate is still too high (its finding stays, or a finding of
    a rate too high came); else None."""
    if edit.remedy != "lr_scale" or result is None or result.verdict == "verified":
        return None
    if not _too_high(result, edit.finding):
        return None
    factor = edit.scale * LOWER_AGAIN
    again = _rate_edit(report, meta, edit.finding, factor)
    return (again, factor) if again is not None else None


def _rate_edit(report: Report, meta: Any, kind: str, factor: float) -> Any:
    """The learning-rate edit of the serious finding of ``kind`` at ``factor`` (None where
    the line that makes the optimizer is not known)."""
    from ..fix.patch import lr_edit

    return lr_edit(next(f for f in report.serious if f.kind == kind), meta, factor)


def _writes_remedy(edit: Any, remedy: Any) -> bool:
    """The edit writes into the code the remedy gradoc applies without a change, for the same
    finding (the learning rate's scale)."""
    return edit.remedy is not None and edit.remedy == remedy.kind and edit.finding == remedy.finding


def _attempt(
    before: Path,
    report: Report,
    meta: Any,
    script: Path,
    script_args: list[str],
    json_path: Path | None,
    fixes: list[Any],
    console: Any,
    out: str | None,
    edit: Any,
    remedy: Any,
    args: list[str] | None = None,
) -> tuple[int, Any]:
    """One re-run with ``edit`` made or ``remedy`` applied, in a working copy, compared with
    the first run (``fix.json``, printed); the exit code and the comparison (None when the
    re-run left no report)."""
    from rich.text import Text

    from ..collect import prepare_run_dir
    from ..fix import compare
    from ..fix.compare import verdict
    from ..report import print_comparison, to_json_text
    from ..report.html import write_fix
    from ..report.json import write_text_file
    from .workcopy import CopyRefused, copy_root, working_copy

    shown = edit.diff() if edit is not None else None  # EditFailed: the file changed
    after = prepare_run_dir(out or _sibling(before), script.stem)
    what = edit if edit is not None else remedy
    root = copy_root(script, Path.cwd())
    console.print(
        Text(f"gradoc fix: re-running {one_line(script.name)} with {what.describe()}, in a ")
        + Text(f"copy of {one_line(root)} (your files stay as they are) -> {one_line(after)}")
    )
    if shown:
        console.print(Text(shown.rstrip()))
    reach = ((meta.side_effects or {}).get("outside") or [])[:3]
    if reach:
        console.print(
            Text(f"gradoc fix: the first run {', '.join(map(str, reach))}, outside the copied ")
            + Text("folder; the re-run will do that again"),
            soft_wrap=True,  # paths whole, to copy
        )
    limit = _rerun_limit(report)
    if limit is not None:
        console.print(
            Text(f"gradoc fix: the re-run is interrupted after {limit:.0f} s{_why(report)}")
        )
    guard, scale = (remedy.guard, remedy.lr_scale) if remedy is not None else (None, 1.0)
    try:
        _reachable(meta, root)
        with working_copy(script, Path.cwd()) as copied:
            if edit is not None:
                _edit_copy(edit, copied)
            began = time.monotonic()
            code, after_report = execute(
                copied.script, args or script_args, after, None, guard, scale, limit_s=limit
            )
    except CopyRefused as exc:  # said in fix.json too, then as gradoc's error
        unrun: JsonObject = {"schema": "gradoc.fix/1", "verdict": "could not run"}
        unrun["why_not"] = [str(exc)]
        if edit is not None:
            unrun["patch"] = {**edit.to_json(), "diff": shown}
        for target in (after / "fix.json", *([json_path] if json_path else [])):
            write_text_file(target, to_json_text(unrun))
        raise
    if code == -SIGINT and limit is not None and time.monotonic() - began >= limit:
        code = 0  # ended at the bound, as asked: the comparison is what this command returns
    if after_report is None:
        return code, None
    result = compare(before, report, after, after_report)
    left = result.left()
    result.remedy = remedy
    result.code_fixes = [f for f in fixes if (f.finding, f.layer) in left]  # not cured
    if edit is not None:
        result.edit, result.diff = edit, shown
        result.verdict, result.why_not = verdict(result, edit.finding, edit.objective)
    text = to_json_text(result.to_json())
    write_text_file(after / "fix.json", text)
    try:
        write_fix(result.to_json(), after / "fix.html")
    except Exception as exc:  # a chart failing on odd data costs the page, never the fix
        console.print(Text(f"gradoc: could not write {after / 'fix.html'}: {exc}"))
    if json_path:
        write_text_file(json_path, text)
    print_comparison(result, what, result.code_fixes, console)
    return code, result


def _reachable(meta: Any, root: Path) -> None:
    """:class:`CopyRefused` when the first run opened files by relative paths that leave
    ``root`` (``../data/train.csv``): a copy of the folder cannot reach them."""
    from .workcopy import CopyRefused

    escapes = (meta.side_effects or {}).get("escapes") or []
    if escapes:
        raise CopyRefused(
            f"the script opens {', '.join(map(str, escapes[:3]))} by a relative path that "
            f"leaves {root}, which a copy of that folder cannot reach: run it from a folder "
            "that holds what it reads, or give those paths absolute"
        )


def _meta(run_dir: Path) -> Any:
    """The run log's ``meta`` (where the lines a fix edits were seen, under ``gradoc run``)."""
    from ..store import open_run

    with open_run(run_dir) as log:
        return log.meta


RERUN_SLACK = 3.0
"""A fix's re-run of a script that ended by itself may take this many times the first run's
length (and a minute more) before it is interrupted: a fix must not hang the command."""


def _rerun_limit(report: Report) -> float | None:
    """How long a fix's re-run may last: as long as the first run where that one was
    interrupted (the user's own bound: an actor-critic trained until Ctrl-C), else
    :data:`RERUN_SLACK` times it and a minute; None when its length is unknown."""
    took = report.run.duration_s
    if took is None:
        return None
    return took if report.run.status == "interrupted" else RERUN_SLACK * took + 60.0


def _why(report: Report) -> str:
    if report.run.status == "interrupted":
        return ", as the first run was"
    return f" ({RERUN_SLACK:g}x the first run and a minute)"


def _rank(report: Report, kind: str) -> int:
    """The place of the first serious finding of ``kind`` (most serious first)."""
    return next((i for i, f in enumerate(report.serious) if f.kind == kind), len(report.serious))


def _edit_copy(edit: Any, copied: Any) -> None:
    """Make ``edit`` in the working copy's file (a file outside the copied folder is not
    edited there: the re-run would not see it, so it is refused)."""
    from ..errors import GradocError

    target = copied.of(Path(edit.file))
    if target is None:
        raise GradocError(
            f"the edit is in {edit.file}, outside the folder gradoc copies to re-run the "
            f"script ({copied.root}): run gradoc fix from a folder that holds both"
        )
    edit.apply(target)


def _said_verdict(
    edit: Any, verdict: str | None, why_not: list[str], write: bool, console: Any
) -> int:
    """Say the edit's verdict; with ``write`` and a verified edit, make it in the user's
    file. 0 when the edit was verified, 1 when it did not help."""
    from rich.text import Text

    if verdict != "verified":
        console.print(
            Text(f"gradoc fix: the edit did not help ({edit.describe()}): {'; '.join(why_not)}")
            + Text("; not written" if write else "")
        )
        return 1
    if edit.objective:
        console.print(
            "gradoc fix: the edit changes what the loss computes, so the two runs' losses are "
            "different quantities: only the fixed run's being finite was checked"
        )
    if write:
        edit.apply()
        console.print(Text(f"gradoc fix: verified, and written to {one_line(edit.file)}"))
    else:
        console.print(Text("gradoc fix: verified; gradoc fix --write makes this edit in your file"))
    return 0


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


def _sibling(before: Path) -> Path:
    """``RUN_DIR-fixed`` (``-fixed-2``, ... when taken)."""
    base = before.with_name(before.name + "-fixed")
    path, i = base, 2
    while (path / "run.db").exists():
        path, i = base.with_name(f"{base.name}-{i}"), i + 1
    return path


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
    escapes = effects.escaping(root)  # a copy cannot reach them
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
        with working_copy(script, Path(cwd)) as copy:
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
