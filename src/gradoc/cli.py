"""The ``gradoc`` command line: ``run``, ``report``, ``fix``, ``demo``."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NoReturn

from ._util.paths import output_file
from ._util.text import one_line, safe
from ._version import __version__
from .errors import GradocError, RunLogError, UsageError
from .runtime.fixing import fix
from .runtime.session import Replay, after_run, execute

FAIL_EXIT = 3
"""`gradoc report --fail-on` exit status when findings of that severity exist."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """argparse's one-line usage error, with what the user typed made safe to print."""
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {safe(message)}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="gradoc",
        description="A training-stability doctor for PyTorch.",
    )
    parser.add_argument("--version", action="version", version=f"gradoc {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    run = sub.add_parser(
        "run",
        help="run a training script unchanged and diagnose it",
        description="Run SCRIPT as `python SCRIPT ARGS` would, watching every optimizer it "
        "creates; write the run directory and print a diagnosis at the end.",
    )
    run.add_argument(
        "--out", metavar="DIR", help="run directory (default gradoc-runs/<script>-<time>)"
    )
    run.add_argument(
        "--resume",
        action="store_true",
        help="continue the run log in --out DIR as a new segment (a training restarted from "
        "its checkpoint): its steps go on from the optimizer's state step, or after the last "
        "logged step; without a log there, a new run starts",
    )
    run.add_argument("--json", metavar="PATH", help="also write the report JSON here")
    run.add_argument(
        "--replay-budget",
        type=_non_negative,
        default=120.0,
        metavar="SECONDS",
        help="when the script stopped at a NaN gradoc could not locate, re-run it up to that "
        "step with tracing armed, for at most this long (0: never; default 120); by itself "
        "only when the script wrote no file outside the run directory, used no network and "
        "started no process",
    )
    run.add_argument(
        "--replay",
        action="store_true",
        help="re-run to locate a NaN even when the script wrote files, used the network or "
        "started processes (a re-run does those again, up to the failing step)",
    )
    run.add_argument(
        "--check",
        action="append",
        choices=["amp", "padding", "numerics"],
        default=[],
        help="amp: mixed-precision readiness (fp16/bf16 overflow and underflow per layer, a "
        "loss scale for GradScaler, modules to keep in fp32); padding: audit that padded "
        "positions do not leak into real ones; numerics: check every operation's output from "
        "the start, anywhere in the program (slow: each operation is checked as it runs), and "
        "report the first that "
        "made a NaN/Inf (repeatable)",
    )
    run.add_argument(
        "--guard",
        action="store_true",
        help="keep the run alive: skip non-finite steps, clip outlier gradient norms (ZClip), "
        "roll back to a snapshot with a lower learning rate when trouble repeats (without "
        "it gradoc only observes: the script computes, prints and exits as under python)",
    )
    run.add_argument(
        "--lr-scale",
        type=_positive,
        default=1.0,
        metavar="FACTOR",
        help="multiply every learning rate (schedules included) by FACTOR, without an edit",
    )
    run.add_argument(
        "--sample-every",
        type=_count,
        metavar="N",
        help="read weights, updates and activations every N steps (default: every 10 to "
        "step 200, then a cadence chosen from the script's own step time so that they cost "
        "about 3%% of it)",
    )
    run.add_argument(
        "--grads-every",
        type=_count,
        metavar="N",
        help="read the gradients' norms every N steps, the loss every step (default: every "
        "step, unless the script's own steps are too short for these reads to fit the "
        "budget: then every few steps from step 200)",
    )
    run.add_argument(
        "--fix",
        action="store_true",
        help="then try the diagnosis's fixes in a copy of the script's folder (an edit of your "
        "code where gradoc writes one, else a learning-rate scale, clipping or skipping "
        "non-finite steps), re-run into DIR-fixed, compare before and after, and say whether "
        "the fix was verified; the next hypothesis' fix follows one that did not help",
    )
    run.add_argument("script", metavar="SCRIPT")
    run.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS")

    fix = sub.add_parser(
        "fix",
        help="re-run a script with the fixes of a run's diagnosis and say which one works",
        description="Read RUN_DIR's diagnosis, make its top fix in a copy of SCRIPT's folder "
        "(an edit of your code where gradoc writes one, else a fix applied without a code "
        "change), re-run SCRIPT there into RUN_DIR-fixed, show before and after side by side "
        "and the verdict; a fix that did not help gives way to the next hypothesis' fix (at "
        "most three). Exit 0 when a fix was verified, 1 when none was.",
    )
    fix.add_argument("run_dir", metavar="RUN_DIR")
    fix.add_argument("--out", metavar="DIR", help="run directory of the re-run")
    fix.add_argument("--json", metavar="PATH", help="also write the comparison JSON here")
    fix.add_argument(
        "--write",
        action="store_true",
        help="when the fix is an edit of your code and the re-run verified it, make the edit "
        "in your file (exactly the diff shown)",
    )
    fix.add_argument("script", metavar="SCRIPT")
    fix.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS")

    rep = sub.add_parser(
        "replay",
        help="re-run a finished run's script to find where its NaN was born",
        description="Re-run the script of RUN_DIR (made by gradoc run) in its directory, with "
        "its arguments and every RNG seeded as before, up to the first non-finite step that "
        "was not located, trace that step and add the origin to the run's report. The "
        "script's side effects up to that step (files, network) happen again.",
    )
    rep.add_argument("run_dir", metavar="RUN_DIR")
    rep.add_argument(
        "--budget", type=_positive, default=600.0, metavar="SECONDS", help="default 600"
    )
    rep.add_argument("--json", metavar="PATH", help="also write the report JSON here")

    report = sub.add_parser("report", help="summarise a run directory (finished or running)")
    report.add_argument("run_dir", metavar="RUN_DIR")
    report.add_argument("--json", action="store_true", help="print report.json instead")
    report.add_argument(
        "--html",
        metavar="PATH",
        help="(re)write the HTML report to PATH (RUN_DIR/report.html: "
        "written at the end of every run)",
    )
    report.add_argument(
        "--fail-on",
        choices=("warning", "error"),
        help="exit with status 3 when a finding of this severity (or worse) exists: for CI",
    )

    plan = sub.add_parser(
        "checkpoint-plan",
        help="measure gradient checkpointing settings for a script's model",
        description="Run SCRIPT up to its first optimizer step, take its model and inputs, "
        "and measure each block's saved activations and time and each checkpointing setting "
        "(every k blocks); print the table, write checkpoint-plan.html/.png/.json.",
    )
    plan.add_argument("--budget", type=_positive, metavar="MIB", help="activation memory budget")
    plan.add_argument("--blocks", metavar="NAME", help="the blocks' container (default: found)")
    plan.add_argument("--out", metavar="DIR", default="gradoc-checkpoint-plan")
    plan.add_argument("--repeats", type=_count, default=3, metavar="N")
    plan.add_argument("script", metavar="SCRIPT")
    plan.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS")

    ampc = sub.add_parser(
        "amp-compare",
        help="run a script's first steps in fp32 and under autocast; compare",
        description="Run SCRIPT's first N optimizer steps twice, in fp32 and under autocast "
        "applied by gradoc (bf16 on the CPU, fp16 with loss scaling on CUDA), and report how "
        "far losses and per-layer gradients drift, the loss scale history, speed and memory.",
    )
    ampc.add_argument("--steps", type=_count, default=20, metavar="N")
    ampc.add_argument("--dtype", choices=["bf16", "fp16"], help="default: fp16 on CUDA, else bf16")
    ampc.add_argument("--tolerance", type=_positive, default=0.05, metavar="REL")
    ampc.add_argument("--json", metavar="PATH", help="also write the comparison JSON here")
    ampc.add_argument("script", metavar="SCRIPT")
    ampc.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS")

    dif = sub.add_parser(
        "diff",
        help="find where two runs part ways (first step and layer beyond run-to-run noise)",
    )
    dif.add_argument("run_a", metavar="RUN_A")
    dif.add_argument("run_b", metavar="RUN_B")
    dif.add_argument("--json", metavar="PATH", help="also write the comparison JSON here")
    dif.add_argument("--html", metavar="PATH", help="write an HTML page with overlay charts")

    demo = sub.add_parser("demo", help="run a built-in scenario and diagnose it")
    demo.add_argument("scenario", nargs="?", metavar="SCENARIO")
    demo.add_argument("--list", action="store_true", help="list the scenarios")
    demo.add_argument("--out", metavar="DIR", help="run directory")
    demo.add_argument(
        "--fixed", action="store_true", help="run the corrected version of the scenario"
    )
    return parser


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, not {text}")
    return value


def _positive(text: str) -> float:
    value = _number(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text}")
    return value


def _non_negative(text: str) -> float:
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {text}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "run":
            return _run(args)
        if args.command == "report":
            return _report(args)
        if args.command == "fix":
            return _fix_command(args)
        if args.command == "replay":
            return _replay_command(args)
        if args.command == "checkpoint-plan":
            return _checkpoint_plan(args)
        if args.command == "amp-compare":
            return _amp_compare(args)
        if args.command == "diff":
            return _diff(args)
        if args.command == "demo":
            from .demo import main as demo_main

            return demo_main(args.scenario, list_only=args.list, out=args.out, fixed=args.fixed)
        parser.print_help()
        return 2
    except GradocError as exc:
        print(f"gradoc: error: {one_line(exc)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("gradoc: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if os.environ.get("GRADOC_DEBUG"):
            raise
        print(
            f"gradoc: internal error: {type(exc).__name__}: {one_line(exc)} "
            "(set GRADOC_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return 70


def _output(path: str | None, flag: str, protect: dict[Path, str] | None = None) -> Path | None:
    """``output_file`` for an optional flag."""
    return output_file(path, flag, protect=protect) if path else None


@contextlib.contextmanager
def _reading(run_dir: str | Path) -> Iterator[None]:
    """Reading a run log someone else may have made or damaged: whatever it holds, the
    answer is a report or one line, never a traceback (GRADOC_DEBUG=1 shows one)."""
    from .store.meta import DamagedLog

    try:
        yield
    except DamagedLog as exc:
        raise RunLogError(
            f"{one_line(run_dir)}: the run log is damaged or was edited: {exc}"
        ) from None
    except (GradocError, KeyboardInterrupt):
        raise
    except Exception as exc:
        if os.environ.get("GRADOC_DEBUG"):
            raise
        raise RunLogError(
            f"{one_line(run_dir)}: the run log holds what gradoc never writes (damaged or "
            f"edited?): {type(exc).__name__}: {one_line(exc)[:200]}"
        ) from None


def _run(args: argparse.Namespace) -> int:
    from .collect import prepare_run_dir, torchrun_rank
    from .config import GuardConfig
    from .runtime.runner import check_script

    script = check_script(args.script)
    rank, world = torchrun_rank()
    protect = {script: "the script"}
    if args.out:
        protect |= {Path(args.out): "the run directory", Path(args.out) / "run.db": "the run log"}
    # every output is checked before the script starts: a mistake costs a line, not a run
    json_path = _output(args.json, "--json", protect)
    if world > 1:  # under torchrun: rank 0 in DIR, rank r in DIR/rank<r>; rank 0 merges
        from .runtime.distributed import rank_dir

        out = rank_dir(args.out, script.stem, rank, args.resume)
    else:
        out = prepare_run_dir(args.out, script.stem, resume=args.resume)
    guard = GuardConfig() if args.guard else None
    json_path = json_path if rank == 0 else None
    replay = Replay(args.replay_budget, args.replay)
    checks = list(args.check or [])
    code, report = execute(
        script,
        list(args.args),
        out,
        json_path,
        guard,
        args.lr_scale,
        checks,
        replay,
        sample_every=args.sample_every,
        grads_every=args.grads_every,
        resume=args.resume,
    )
    # from here on, whatever fails, the script's exit code is the answer
    if world > 1 and report is not None:
        if rank != 0:
            return code
        from .runtime.distributed import merge_ranks

        report = after_run(lambda: merge_ranks(out, world, json_path), "merge the ranks' reports")
    if report is not None:
        from .report import print_run_summary

        after_run(lambda: print_run_summary(out, report), "print the diagnosis")
    if args.fix and report is not None:
        return fix(out, report, script, list(args.args), None, None)
    if code < 0:  # python would have died of the signal (-2: a KeyboardInterrupt)
        from .collect.termination import end_by

        end_by(-code)
    return code


def _diff(args: argparse.Namespace) -> int:
    from .compare import diff_runs
    from .report import to_json_text
    from .report.json import write_text_file

    json_path = _output(args.json, "--json")
    html_path = _output(args.html, "--html")
    with _reading(f"{args.run_a} or {args.run_b}"):
        result = diff_runs(args.run_a, args.run_b)
        if html_path:
            from .report.html import write_diff

            write_diff(result, html_path)
    if json_path and not write_text_file(json_path, to_json_text(result.to_json())):
        return 1
    parted = result.parted
    print(f"gradoc diff: {safe(result.explanation)}")
    if parted:
        for x in parted.others_at_step:
            print(
                f"  also at step {parted.step}: {one_line(x.layer)} "
                f"{one_line(x.statistic)} x{x.ratio:.3g}"
            )
    print(
        f"  {result.steps_compared} steps compared; median loss difference "
        f"{(result.loss_rel_diff_median or 0):.1%}"
    )
    return 0


def _amp_compare(args: argparse.Namespace) -> int:
    from .report import print_amp_compare, status, to_json_text
    from .report.json import write_text_file
    from .runtime.runner import check_script
    from .tools.amp_compare import compare

    script = check_script(args.script)
    json_path = _output(args.json, "--json", {script: "the script"})
    dtype = args.dtype
    if dtype is None:
        import torch

        dtype = "fp16" if torch.cuda.is_available() else "bf16"
    with status(f"running {script.name} twice: fp32 and {dtype} autocast"):
        result = compare(script, list(args.args), args.steps, dtype, args.tolerance)
    print_amp_compare(result)
    if json_path and not write_text_file(json_path, to_json_text(result.to_json())):
        return 1
    return 0


def _checkpoint_plan(args: argparse.Namespace) -> int:
    from ._util.paths import output_dir
    from .report import print_checkpoint_plan, status
    from .runtime.runner import check_script
    from .tools.checkpointing import capture_first_step, plan_checkpointing

    script = check_script(args.script)
    out = output_dir(args.out, "--out")
    for name in ("checkpoint-plan.html", "checkpoint-plan.png", "checkpoint-plan.json"):
        output_file(out / name, "--out", protect={script: "the script"})
    with status(f"running {script.name} to its first optimizer step"):
        model, inputs, kwargs = capture_first_step(script, list(args.args))
    with status("measuring blocks and checkpointing settings"):
        plan = plan_checkpointing(
            model, inputs, blocks=args.blocks, kwargs=kwargs, repeats=args.repeats
        )
    budget = args.budget * 2**20 if args.budget else None
    page = plan.write(out, budget)
    print_checkpoint_plan(plan, budget)
    print(f"plan     {safe(page)}  (and checkpoint-plan.png, .json)")
    return 0


def _fix_command(args: argparse.Namespace) -> int:
    from .analysis import analyze
    from .runtime.runner import check_script
    from .store import open_run

    script = check_script(args.script)
    before = Path(args.run_dir)
    with _reading(before), open_run(before) as log:  # a clear error when RUN_DIR is not a run
        report = analyze(log)
        before = log.dir
    json_path = _output(args.json, "--json", {script: "the script"})
    return fix(before, report, script, list(args.args), args.out, json_path, args.write)


def _replay_command(args: argparse.Namespace) -> int:
    from ._util.paths import _probe_dir
    from .report import print_run_summary, write_report
    from .runtime.replay import not_replayable, replay, script_digest, unlocated_step
    from .store import open_run

    run_dir = Path(args.run_dir)
    with _reading(run_dir), open_run(run_dir) as log:
        events, meta = log.events, log.meta
        run_dir = log.dir
    launch = meta.launch
    fields = {"script": str, "args": list, "cwd": str, "sha256": str}
    if not isinstance(launch, dict) or not all(
        isinstance(launch.get(k), t) for k, t in fields.items()
    ):
        raise UsageError(f"{one_line(run_dir)} was not made by gradoc run: no script to re-run")
    clues = meta.exit_clues
    step = unlocated_step(events, meta, meta.exit_code, clues)
    if step is None:
        print("gradoc replay: nothing to locate: the run has no NaN/Inf whose origin is unknown")
        return 0
    why_not = not_replayable(meta, step)
    if why_not is not None:
        raise UsageError(f"cannot replay {one_line(run_dir)}: {why_not}")
    json_path = _output(args.json, "--json")
    _probe_dir(run_dir, "RUN_DIR")
    script, script_args = Path(launch["script"]), [str(a) for a in launch["args"]]
    try:
        same = script_digest(script) == launch["sha256"]
    except OSError:
        same = False
    if not same:
        raise UsageError(
            f"{one_line(script)} is gone or has changed since the run; run it again with gradoc run"
        )
    shown = " ".join([one_line(script), *map(one_line, script_args)])
    print(
        f"gradoc: re-running {shown} (in {one_line(launch['cwd'])}) up to step {step} with "
        f"tracing armed there, for at most {args.budget:g} s; its side effects up to that "
        "step happen again",
        file=sys.stderr,
    )
    origin = replay(run_dir, script, script_args, launch["cwd"], step, args.budget)
    report = write_report(run_dir, json_path)
    print_run_summary(run_dir, report)
    if origin is None:
        print("gradoc replay: the re-run did not show where the value was born", file=sys.stderr)
    return 0


def _report(args: argparse.Namespace) -> int:
    from .analysis import analyze
    from .report import print_summary, to_json_text
    from .store import open_run

    with _reading(args.run_dir), open_run(args.run_dir) as log:
        html = _output(args.html, "--html", {log.path: "the run log"})
        report = analyze(log)
        if html:
            from .report.html import write_html

            try:
                write_html(log, report, html)
            except OSError as exc:
                raise UsageError(f"could not write {one_line(html)}: {exc.strerror}") from None
        if args.json:
            print(to_json_text(report), end="")
        else:
            print_summary(log, report)
    return FAIL_EXIT if args.fail_on and report.failing(args.fail_on) else 0


if __name__ == "__main__":
    raise SystemExit(main())
