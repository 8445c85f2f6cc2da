"""``gradoc fix``: the diagnosis' fixes tried in a working copy, one hypothesis after another.

The fixes come from the report's serious findings, most serious first (:func:`plan`): each
finding's edit of the user's code where gradoc writes one (``fix.patch``), then the fixes
gradoc applies without a code change (``fix.remedy``). Each try re-runs the script in a copy
of its folder (``workcopy``: the user's files stay as they are), compares the re-run with the
first run and judges it (``fix.compare.verdict``). A fix that does not verify gives way to the
next one, up to :data:`MAX_FIXES`; a learning rate too high is one fix, tried lower while it
stays too high. Only a verified edit is ever made in the user's file, and only on ``--write``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from signal import SIGINT
from typing import Any

from .._util.json_types import JsonObject
from .._util.text import one_line
from ..analysis import Report
from ..fix.compare import NOT_JUDGED, Comparison, Tried
from ..fix.patch import Edit
from ..fix.remedy import Remedy

MAX_FIXES = 3
"""Different fixes tried before ``gradoc fix`` gives up: the most serious finding's, then the
next hypothesis' while none verified. With a learning rate's lower tries that is at most five
re-runs."""


@dataclass(frozen=True, slots=True)
class Try:
    """One hypothesis' fix: an edit, a remedy, or both where the edit writes the remedy into
    the code (a learning rate: scaled without a code change, then where the optimizer is
    made)."""

    finding: str
    edit: Edit | None = None
    remedy: Remedy | None = None

    def repeats(self, earlier: Try) -> bool:
        """The same fix as ``earlier``: the same edit, or a remedy of the same kind (a clip is
        a clip whichever finding asked for it)."""
        same_edit = (
            self.edit is not None
            and earlier.edit is not None
            and (self.edit.file, self.edit.line, self.edit.after)
            == (earlier.edit.file, earlier.edit.line, earlier.edit.after)
        )
        same_remedy = (
            self.remedy is not None
            and earlier.remedy is not None
            and self.remedy.kind == earlier.remedy.kind
        )
        return same_edit or same_remedy


def plan(
    report: Report,
    meta: Any,
    sources: list[Path],
    args: Sequence[str] = (),
    why: list[str] | None = None,
) -> list[Try]:
    """The fixes to try, in order: for each serious finding, most serious first, its edit
    where gradoc writes one, then each fix it applies without a code change (a learning
    rate's paired with its edit where the optimizer is made); a fix already planned is not
    planned again. In a program that steps no ``torch.optim`` optimizer (a hand-written
    update), gradoc's own scale, clip and skip (made at the optimizer's step) reach nothing:
    they are planned only where a flag of the command (``args``) sets that knob. ``why``:
    where the reasons a writer gave for writing no edit are added."""
    from ..fix.patch import edit_for, lr_edit
    from ..fix.remedy import clip_flags, remedies, scaled_lr_flags

    flagged = {
        "lr_scale": scaled_lr_flags(list(args), 1.0) is not None,
        "clip": clip_flags(list(args), 1.0) is not None,
    }
    stepped = bool(meta.optimizers) or "backward()" not in meta.steps_counted_by
    tries: list[Try] = []
    for f in report.serious:
        edit = edit_for([f], meta, sources, why)
        if edit is not None and edit.remedy is None:
            tries.append(Try(f.kind, edit))
        for remedy in remedies(f):
            rate = lr_edit(f, meta) if remedy.kind == "lr_scale" else None
            if not stepped and rate is not None and not flagged["lr_scale"]:
                tries.append(Try(f.kind, rate))  # gradoc's scale reaches no update: the code's
            elif stepped or rate is not None or flagged.get(remedy.kind):
                tries.append(Try(f.kind, rate, remedy))
    out: list[Try] = []
    for t in tries:
        if not any(t.repeats(e) for e in out):
            out.append(t)
    return out


def fix(
    before: Path,
    report: Report,
    script: Path,
    script_args: list[str],
    out: str | None,
    json_path: Path | None,
    write: bool = False,
) -> int:
    """Try the fixes of ``report``'s diagnosis (:func:`plan`) in a copy of the script's folder
    until one is verified, at most :data:`MAX_FIXES`; print each before/after and the verdict.
    With ``write``, a verified edit is made in the user's file. 0 when a fix was verified, 1
    when none helped (the exit code of a re-run that left no report, where none did)."""
    from rich.console import Console

    from ..fix import code_fixes
    from ..fix.remedy import remedies, user_sources
    from ..report import print_comparison

    console = Console(stderr=True)
    if report.status == "healthy":
        console.print("gradoc fix: the run is healthy; nothing to fix")
        return 0
    sources = user_sources(script)
    meta = _meta(before)
    fixes = code_fixes(report, sources)
    why: list[str] = []
    tries = plan(report, meta, sources, script_args, why)
    if not tries:
        unreached = any(remedies(f) for f in report.serious)  # gradoc's, made at opt.step()
        console.print(
            "gradoc fix: the program steps no torch.optim optimizer, so gradoc's learning-rate "
            "scale, clip and skip (made at the optimizer's step) would reach nothing, and no "
            "flag of the command sets them; every fix left needs a code change:"
            if unreached
            else "gradoc fix: every fix of this diagnosis needs a code change:"
        )
        print_comparison(None, None, fixes, console)
        for reason in dict.fromkeys(why):
            console.print(f"gradoc fix: no edit written: {reason}")
        return 1  # nothing was verified
    rerun = Rerun(before, report, meta, script, script_args, json_path, fixes, console, out)
    code, last = 0, None
    for n, t in enumerate(tries[:MAX_FIXES]):
        if n:
            console.print(
                f"gradoc fix: the next hypothesis' fix ({n + 1} of at most "
                f"{min(MAX_FIXES, len(tries))}), for {t.finding}:"
            )
        code, result = _try(rerun, t)
        last = result if result is not None else last
        if result is not None and result.verdict in ("verified", NOT_JUDGED):
            break  # a fix that cannot be judged by its loss: neither can the next
    pair = _together(rerun) if last is not None and last.verdict == "did not help" else None
    if pair is not None:
        console.print("gradoc fix: neither fix verified alone; both were indicated, together once:")
        code, result = rerun(*pair)
        last = result if result is not None else last
    elif last is not None and last.verdict == "verified":
        last = _with_the_rest(rerun, last, tries)
    if last is None:
        return code
    if last.verdict != "verified":
        for reason in dict.fromkeys(why):
            console.print(f"gradoc fix: no edit written: {reason}")
    return _said_verdict(last, rerun.tried, write, console)


def _with_the_rest(rerun: Rerun, done: Comparison, tries: list[Try]) -> Comparison:
    """A verified edit that left another serious finding whose own edit is in the same file
    (a mask returned, the pad labels still scored): both made together, once; kept where
    that is verified too, else the first edit alone stands (its ``fix.json`` written again)."""
    from ..fix.edit import merged
    from ..report import to_json_text
    from ..report.json import write_text_file

    left = {f.kind for f in done.remaining}
    if done.edit is None or done.edit.remedy is not None:
        return done
    rest = [t.edit for t in tries if t.finding in left and t.edit is not None and not t.remedy]
    both = merged(done.edit, rest[0]) if rest else None
    if both is None:
        return done
    said = f"two fixes together: {done.edit.describe()}; and {rest[0].describe()}"
    rerun.console.print(
        f"gradoc fix: {rest[0].finding} is still there; its fix made with this one, once:"
    )
    _, result = rerun(both, None, None, Together(done.edit.finding, said))
    if result is not None and result.verdict == "verified":
        return result
    if rerun.json_path:  # the first edit alone stands
        write_text_file(rerun.json_path, to_json_text(done.to_json()))
    rerun.console.print("gradoc fix: together they were not verified; the first edit alone is")
    return done


def _two_edits(
    rerun: Rerun,
) -> tuple[Edit | None, Remedy | None, list[str] | None, Together] | None:
    """The last two edits tried alone, for two findings (a mask and pad labels), made as one
    where they are in one file and do not overlap."""
    from ..fix.edit import merged

    edits = [c[0] for c in rerun.calls if c[0] is not None and c[0].remedy is None and not c[1]]
    if len(edits) < 2 or edits[-1].finding == edits[-2].finding:
        return None
    both = merged(edits[-2], edits[-1])
    if both is None:
        return None
    said = f"two fixes together: {edits[-2].describe()}; and {edits[-1].describe()}"
    return both, None, None, Together(edits[-2].finding, said)


@dataclass(frozen=True, slots=True)
class Together:
    """Two fixes made in one re-run (a learning rate lowered and the clip restored), where
    each alone did not verify: what the re-run says it tried."""

    finding: str
    said: str

    def describe(self) -> str:
        return self.said


Call = tuple[Edit | None, Remedy | None, list[str] | None]


def _together(rerun: Rerun) -> tuple[Edit | None, Remedy | None, list[str] | None, Together] | None:
    """A learning rate lowered (its lowest try: an edit or the command's flags) and the
    gradient clipped (gradoc's clip or the command's clip flag) in one re-run, where both were
    tried alone and neither verified; None where they were not both tried."""
    from ..fix.remedy import clip_flags, flag_clip

    both = _two_edits(rerun)
    if both is not None:
        return both
    rates = [
        c for c in rerun.calls
        if (c[0] is not None and c[0].remedy == "lr_scale")
        or (c[1] is not None and c[1].kind == "lr_flags")
    ]  # fmt: skip
    clips = [c for c in rerun.calls if c[1] is not None and c[1].kind in ("clip", "clip_flags")]
    if not rates or not clips:
        return None
    (edit, rate, rate_args), (_, clip, clip_args) = rates[-1], clips[-1]
    assert clip is not None
    args = rate_args
    if clip.kind == "clip_flags":  # the clip in the command: set in the rate's arguments too
        flagged = clip_flags(list(rate_args or rerun.args), flag_clip(clip.value))
        if flagged is None:
            return None
        args = flagged[0]
    first = edit.describe() if edit is not None else rate.describe() if rate is not None else ""
    said = f"two fixes together: {first}; and {clip.describe()}"
    finding = edit.finding if edit is not None else rate.finding if rate is not None else ""
    return edit, clip, args or clip_args, Together(finding, said)


def _try(rerun: Rerun, t: Try) -> tuple[int, Comparison | None]:
    """One fix, re-run; a learning rate still too high gets lower tries."""
    from ..fix.remedy import clip_flags, flag_clip, scaled_lr_flags

    edit, remedy = t.edit, t.remedy
    if remedy is not None and remedy.kind == "lr_scale" and scaled_lr_flags(rerun.args, 1.0):
        return _by_flags(rerun, remedy)  # the command's own knob
    to = flag_clip(remedy.value) if remedy is not None and remedy.kind == "clip" else None
    flagged = clip_flags(rerun.args, to) if to is not None else None
    if remedy is not None and to is not None and flagged is not None:  # the program's own clip
        flags = Remedy("clip_flags", to, remedy.finding, " ".join(flagged[1]))
        return rerun(None, flags, flagged[0])
    if remedy is None:
        assert edit is not None
        code, result = rerun(edit, None)
    elif edit is None:
        return rerun(None, remedy)
    else:  # a learning rate: no code change first, then written where the optimizer is made
        code, result = rerun(None, remedy)
        if result is None or not _too_high(result, remedy.finding):
            return code, result
        if _first_update_scaled(result):  # the scale took hold: the rate is still too high
            factor = remedy.lr_scale * LOWER_AGAIN
            edit = _rate_edit(rerun.report, rerun.meta, remedy.finding, factor) or edit
            rerun.console.print(
                f"gradoc fix: still too high at x{remedy.lr_scale:g}; x{factor:g}, written where "
                "the optimizer is made:"
            )
        else:  # its first update was the first run's: the scale came late, or never
            rerun.console.print(
                "gradoc fix: the scale did not reach the optimizer's first update (its loss "
                "after it was the first run's); the same scale, written where it is made:"
            )
        code, result = rerun(edit, None)
    again = _lower_again(edit, result, rerun.report, rerun.meta)
    if again is not None:
        first, lower = again[1] / LOWER_AGAIN, again[1]
        rerun.console.print(
            f"gradoc fix: the rate x{first:g} did not cure it; one try more, x{lower:g}:"
        )
        code, result = rerun(again[0], None)
    return code, result


FLAG_TRIES = 3
"""A learning rate set by the command's flags is tried at the diagnosis' scale, then 10x and
100x lower while it is still too high (a rate raised 1000x needs the third)."""


def _by_flags(rerun: Rerun, remedy: Remedy) -> tuple[int, Comparison | None]:
    """The learning rate scaled where the command sets it (``--learning_rate=0.1``): the
    program's own knob, which reaches a rate it sets each step from its flags (nanoGPT's
    schedule) as gradoc's scale of the optimizer cannot; lower while it is still too high."""
    from ..fix.remedy import scaled_lr_flags

    factor = remedy.lr_scale
    for i in range(FLAG_TRIES):
        scaled = scaled_lr_flags(rerun.args, factor)
        assert scaled is not None
        new_args, changed = scaled
        flags = Remedy("lr_flags", factor, remedy.finding, " ".join(changed))
        code, result = rerun(None, flags, new_args)
        if result is None or not _too_high(result, remedy.finding) or i == FLAG_TRIES - 1:
            return code, result
        rerun.console.print(
            f"gradoc fix: the rate x{factor:g} did not cure it; x{factor * LOWER_AGAIN:g}:"
        )
        factor *= LOWER_AGAIN
    raise AssertionError("unreachable: the last try returns")


LOWER_AGAIN = 0.1
"""A learning-rate edit that left the blow-up is tried once more, this much lower again (a rate
raised 100x needs more than the tenth the diagnosis asks for first)."""

_STILL_TOO_HIGH = frozenset(
    {"loss_blowup", "loss_divergence", "loss_spike", "large_updates", "exploding_gradients"}
    | {"attention_logit_growth", "output_logit_divergence"}  # the precursors of a rate too high
    | {"dead_units", "policy_collapse", "measure_worsened"}  # what a rate still too high leaves
)


def _first_update_scaled(result: Comparison) -> bool:
    """The no-code scale reached the optimizer's first update: the loss after it differs from
    the first run's (the runs are seeded alike). LBFGS's first step ran its inner iterations
    at the unscaled rate (``tests/shapes/lbfgs_lr80.py``): the same scale written where the
    optimizer is made is its fix, where a scale that took hold and left the rate too high
    calls for 10x lower."""
    before, after = result.before.loss, result.after.loss
    return len(before) > 1 and len(after) > 1 and before[1] != after[1]


def _too_high(result: Comparison, kind: str) -> bool:
    """The re-run still shows the finding a lower rate was for, or another of a rate too high
    (a divergence that became a blow-up)."""
    return any(f.kind == kind or f.kind in _STILL_TOO_HIGH for f in result.remaining + result.new)


def _lower_again(
    edit: Edit, result: Comparison | None, report: Report, meta: Any
) -> tuple[Edit, float] | None:
    """The learning-rate edit scaled :data:`LOWER_AGAIN` further, and its factor, when the
    first did not help because the rate is still too high (its finding stays, or a finding of
    a rate too high came); else None."""
    if edit.remedy != "lr_scale" or edit.scale is None or result is None:
        return None
    if result.verdict == "verified" or not _too_high(result, edit.finding):
        return None
    factor = edit.scale * LOWER_AGAIN
    again = _rate_edit(report, meta, edit.finding, factor)
    return (again, factor) if again is not None else None


def _rate_edit(report: Report, meta: Any, kind: str, factor: float) -> Edit | None:
    """The learning-rate edit of the serious finding of ``kind`` at ``factor`` (None where
    the line that makes the optimizer is not known)."""
    from ..fix.patch import lr_edit

    return lr_edit(next(f for f in report.serious if f.kind == kind), meta, factor)


@dataclass
class Rerun:
    """The script re-run with a fix, in a working copy, compared with the first run; what
    every re-run of one ``gradoc fix`` shares, and what each one tried."""

    before: Path
    report: Report
    meta: Any
    script: Path
    args: list[str]
    json_path: Path | None
    fixes: list[Any]
    console: Any
    out: str | None = None
    """``--out``: the first re-run's directory; the next go to ``OUT-2``, ``OUT-3``, ..."""
    tried: list[Tried] = field(default_factory=list)
    """Each re-run so far: what it tried, where it ran, its verdict."""
    calls: list[Call] = field(default_factory=list)
    """Each re-run so far: its edit, remedy and arguments."""

    def next_dir(self) -> Path:
        """Where the next re-run goes: ``--out``, then ``OUT-2``, ...; without it
        ``RUN_DIR-fixed``, ``RUN_DIR-fixed-2``, ..."""
        if self.out is None:
            return _sibling(self.before)
        n = len(self.tried)
        return Path(self.out) if n == 0 else Path(f"{self.out}-{n + 1}")

    def __call__(
        self,
        edit: Edit | None,
        remedy: Remedy | None,
        args: list[str] | None = None,
        together: Together | None = None,
    ) -> tuple[int, Comparison | None]:
        """One re-run with ``edit`` made or ``remedy`` applied (``args``: other arguments;
        ``together``: what a re-run of two fixes says it tried), judged, ``fix.json`` and
        ``fix.html`` written, printed; the exit code and the comparison (None when the re-run
        left no report)."""
        from rich.text import Text

        from ..collect import prepare_run_dir
        from ..fix import compare
        from ..fix.compare import verdict
        from ..report import print_comparison, to_json_text
        from ..report.html import write_fix
        from ..report.json import write_text_file
        from .session import execute
        from .workcopy import CopyRefused, copy_root, working_copy

        console = self.console
        shown = edit.diff() if edit is not None else None  # EditFailed: the file changed
        after = prepare_run_dir(self.next_dir(), self.script.stem)
        what: Any = together or (edit if edit is not None else remedy)
        self.calls.append((edit, remedy, args))
        root = copy_root(self.script, Path.cwd())
        console.print(
            Text(f"gradoc fix: re-running {one_line(self.script.name)} with {what.describe()}, ")
            + Text(f"in a copy of {one_line(root)} (your files stay as they are) -> ")
            + Text(one_line(after))
        )
        if shown:
            console.print(Text(shown.rstrip()))
        reach = ((self.meta.side_effects or {}).get("outside") or [])[:3]
        if reach:
            console.print(
                Text(f"gradoc fix: the first run {', '.join(map(str, reach))}, outside the ")
                + Text("copied folder; the re-run will do that again"),
                soft_wrap=True,  # paths whole, to copy
            )
        limit = _rerun_limit(self.report)
        if limit is not None:
            console.print(
                Text(f"gradoc fix: the re-run will be interrupted if it runs past {limit:.0f} s")
                + Text(_why(self.report))
            )
        guard, scale = (remedy.guard, remedy.lr_scale) if remedy is not None else (None, 1.0)
        try:
            reads = _reachable(self.meta, root)
            with working_copy(self.script, Path.cwd(), reads=reads) as copied:
                if edit is not None:
                    _edit_copy(edit, copied)
                began = time.monotonic()
                code, after_report = execute(
                    copied.script,
                    args or self.args,
                    after,
                    None,
                    guard,
                    scale,
                    limit_s=limit,
                    rerun=True,
                )
        except CopyRefused as exc:  # said in fix.json too, then as gradoc's error
            unrun: JsonObject = {"schema": "gradoc.fix/1", "verdict": "could not run"}
            unrun["why_not"] = [str(exc)]
            if edit is not None:
                unrun["patch"] = {**edit.to_json(), "diff": shown}
            for target in (after / "fix.json", *([self.json_path] if self.json_path else [])):
                write_text_file(target, to_json_text(unrun))
            raise
        if code == -SIGINT and limit is not None and time.monotonic() - began >= limit:
            code = 0  # ended at the bound, as asked: the comparison is what this returns
        if after_report is None:
            self.tried.append(Tried(what.describe(), str(after), None))
            return code, None
        result = compare(self.before, self.report, after, after_report)
        left = result.left()
        result.remedy = remedy
        result.code_fixes = [f for f in self.fixes if (f.finding, f.layer) in left]  # not cured
        result.edit, result.diff = edit, shown
        objective = edit.objective if edit is not None else False
        result.verdict, result.why_not = verdict(result, what.finding, objective)
        result.tried = list(self.tried)
        result.together = together.said if together is not None else None
        self.tried.append(Tried(what.describe(), str(after), result.verdict))
        text = to_json_text(result.to_json())
        write_text_file(after / "fix.json", text)
        try:
            write_fix(result, after / "fix.html")
        except Exception as exc:  # a chart failing on odd data costs the page, never the fix
            console.print(Text(f"gradoc: could not write {after / 'fix.html'}: {exc}"))
        if self.json_path:
            write_text_file(self.json_path, text)
        print_comparison(result, what, result.code_fixes, console)
        if result.verdict != "verified":
            said = "cannot tell" if result.verdict == NOT_JUDGED else "did not help"
            console.print(
                Text(f"gradoc fix: {said} ({what.describe()}): ") + Text("; ".join(result.why_not))
            )
        return code, result


def _reachable(meta: Any, root: Path) -> list[Path]:
    """The files the first run read by relative paths that leave ``root`` (``../data/
    train.csv``), which the copy links (``workcopy.working_copy``); :class:`CopyRefused` when
    it also opened such a path to write, or read more than the run log kept: a copy of the
    folder cannot take those."""
    from .workcopy import CopyRefused

    said = meta.side_effects or {}
    reads = [r for r in said.get("reads") or [] if isinstance(r, list) and len(r) == 2]
    read_as = {str(r[0]) for r in reads}
    escapes = [e for e in said.get("escapes") or [] if str(e) not in read_as]
    if escapes:
        raise CopyRefused(
            f"the script opens {', '.join(map(str, escapes[:3]))} by a relative path that "
            f"leaves {root} and writes there (or reads more there than a copy links), which a "
            "copy of that folder cannot take: run it from a folder that holds what it "
            "writes, or give those paths absolute"
        )
    return [Path(str(r[1])) for r in reads]


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


def _edit_copy(edit: Edit, copied: Any) -> None:
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


def _said_verdict(result: Comparison, tried: list[Tried], write: bool, console: Any) -> int:
    """Say the outcome: the fix verified (with ``write``, a verified edit made in the user's
    file), or that none of those tried helped. 0 when verified, 1 when not."""
    from rich.text import Text

    if result.verdict == NOT_JUDGED:
        console.print(
            Text("gradoc fix: no verdict: ")
            + Text("; ".join(result.why_not))
            + Text("; nothing written" if write else "")
        )
        return 1
    if result.verdict != "verified":
        runs = f"{len(tried)} re-run{'s' if len(tried) != 1 else ''}"
        console.print(
            Text(f"gradoc fix: no fix tried was verified ({runs}, each in its own directory)")
            + Text("; nothing written" if write else "")
        )
        return 1
    edit, remedy = result.edit, result.remedy
    if result.together is not None:
        console.print(Text(f"gradoc fix: verified: {result.together}"))
        if write and edit is not None:
            edit.apply()
            console.print(Text(f"gradoc fix: the edit written to {one_line(edit.file)}"))
        elif edit is not None:
            console.print("gradoc fix: gradoc fix --write makes the edit in your file")
        if remedy is not None:
            console.print(
                Text(f"gradoc fix: {remedy.describe()} is no edit of your code: make it too")
                + Text(" (the command's flag)" if remedy.kind == "clip_flags" else "")
            )
        return 0
    if edit is None:
        assert remedy is not None
        console.print(
            Text(f"gradoc fix: verified, with no code change: {remedy.describe()}")
            + Text("; nothing to write" if write else "")
        )
        return 0
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


def _sibling(before: Path) -> Path:
    """``RUN_DIR-fixed`` (``-fixed-2``, ... when taken)."""
    base = before.with_name(before.name + "-fixed")
    path, i = base, 2
    while (path / "run.db").exists():
        path, i = base.with_name(f"{base.name}-{i}"), i + 1
    return path
