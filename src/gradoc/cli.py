"""The ``gradoc`` command line: ``run``, ``report``, ``fix``, ``demo``."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._version import __version__
from .errors import GradocError, UsageError

FAIL_EXIT = 3
"""`gradoc report --fail-on` exit status when findings of that severity exist."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gradoc",
        description="A training-stability doctor for PyTorch.",
    )
    parser.add_argument("--version", action="version", version=f"gradoc {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser(
        "run",
        help="run a training script unchanged and diagnose it",
        description="Run SCRIPT as `python SCRIPT ARGS` would, watching every optimizer it "
        "creates; write the run directory and print a diagnosis at the end.",
    )
    run.add_argument(
        "--out", metavar="DIR", help="run directory (default gradoc-runs/<script>-<time>)"
    )
    run.add_argument("--json", metavar="PATH", help="also write the report JSON here")
    run.add_argument(
        "--replay-budget",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="when the script stopped at a NaN gradoc could not locate, re-run it up to that "
        "step with tracing armed, for at most this long (0: never; default 120)",
    )
    run.add_argument(
        "--check",
        action="append",
        choices=["amp", "padding"],
        default=[],
        help="amp: mixed-precision readiness (fp16/bf16 overflow and underflow per layer, a "
        "loss scale for GradScaler, modules to keep in fp32); padding: audit that padded "
        "positions do not leak into real ones (repeatable)",
    )
    run.add_argument(
        "--guard",
        action="store_true",
        help="keep the run alive: skip non-finite steps, clip outlier gradient norms (ZClip), "
        "roll back to a snapshot with a lower learning rate when trouble repeats",
    )
    run.add_argument(
        "--lr-scale",
        type=_positive,
        default=1.0,
        metavar="FACTOR",
        help="multiply every learning rate (schedules included) by FACTOR, without an edit",
    )
    run.add_argument(
        "--fix",
        action="store_true",
        help="then apply the diagnosis's top fix that needs no code change (learning-rate "
        "scale, clipping, skipping non-finite steps), re-run the script into DIR-fixed and "
        "compare before and after",
    )
    run.add_argument("script", metavar="SCRIPT")
    run.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS")

    fix = sub.add_parser(
        "fix",
        help="re-run a script with the top fix of a run's diagnosis and compare",
        description="Read RUN_DIR's diagnosis, apply its top fix that needs no code change, "
        "re-run SCRIPT into RUN_DIR-fixed, and show before and after side by side.",
    )
    fix.add_argument("run_dir", metavar="RUN_DIR")
    fix.add_argument("--out", metavar="DIR", help="run directory of the re-run")
    fix.add_argument("--json", metavar="PATH", help="also write the comparison JSON here")
    fix.add_argument("script", metavar="SCRIPT")
    fix.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS")

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
    plan.add_argument("--repeats", type=int, default=3, metavar="N")
    plan.add_argument("script", metavar="SCRIPT")
    plan.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS")

    ampc = sub.add_parser(
        "amp-compare",
        help="run a script's first steps in fp32 and under autocast; compare",
        description="Run SCRIPT's first N optimizer steps twice, in fp32 and under autocast "
        "applied by gradoc (bf16 on the CPU, fp16 with loss scaling on CUDA), and report how "
        "far losses and per-layer gradients drift, the loss scale history, speed and memory.",
    )
    ampc.add_argument("--steps", type=int, default=20, metavar="N")
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


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text}")
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
        print(f"gradoc: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if os.environ.get("GRADOC_DEBUG"):
            raise
        print(
            f"gradoc: internal error: {type(exc).__name__}: {exc} "
            "(set GRADOC_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return 70


def _run(args: argparse.Namespace) -> int:
    from ._runner import check_script
    from .collect import prepare_run_dir
    from .config import GuardConfig

    script = check_script(args.script)
    _check_json_path(args.json)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:  # under torchrun: rank 0 in DIR, rank r in DIR/rank<r>; rank 0 merges
        from .distributed import rank_dir

        out = rank_dir(args.out, script.stem, rank)
    else:
        out = prepare_run_dir(args.out, script.stem)
    guard = GuardConfig() if args.guard else None
    json_path = args.json if rank == 0 else None
    code, report = _execute(script, list(args.args), out, json_path, guard, args.lr_scale, args)
    if world > 1 and report is not None:
        if rank != 0:
            return code
        from .distributed import merge_ranks

        report = merge_ranks(out, world, json_path)
    if report is not None:
        print_run_summary(out, report)
    if args.fix and report is not None:
        return _fix(out, report, script, list(args.args), None, None)
    return code


def _check_json_path(path: str | None) -> None:
    if path and not Path(path).resolve().parent.is_dir():
        raise UsageError(f"--json {path}: directory {Path(path).parent} does not exist")


def _execute(
    script: Path,
    script_args: list[str],
    out: Path,
    json_path: str | None,
    guard: Any,
    lr_scale: float,
    args: argparse.Namespace | None,
) -> tuple[int, dict[str, Any] | None]:
    """Run the script watched into ``out``; return its exit code and the report."""
    from ._replay import seed_everything
    from ._runner import exec_script
    from .collect.auto import AutoAttach
    from .collect.run import Run
    from .config import WatchConfig

    checks = getattr(args, "check", []) if args is not None else []
    config = WatchConfig(guard=guard, check_amp="amp" in checks, check_padding="padding" in checks)
    run = Run(out, config, script=str(script), lr_scale=lr_scale)
    auto = AutoAttach(run)
    code = 1
    seed_everything()  # so that a replay can repeat the run exactly (the script's seeds win)
    try:
        code = exec_script(script, script_args)
    finally:
        auto.remove()
        status = "finished" if code == 0 else ("interrupted" if code == 130 else "failed")
        if run._guard is not None and run._guard.gave_up:
            status = "gave_up"
        report = run.close(status=status, exit_code=code, json_path=json_path)
    if report is not None and args is not None and args.replay_budget > 0:
        report = _replay_if_needed(out, script, script_args, code, args) or report
    return code, report


def _diff(args: argparse.Namespace) -> int:
    from .compare import diff_runs
    from .report import to_json_text

    _check_json_path(args.json)
    _check_json_path(args.html)
    result = diff_runs(args.run_a, args.run_b)
    if args.json:
        Path(args.json).write_text(to_json_text(result))
    if args.html:
        from .report.html import write_diff

        write_diff(result, Path(args.html))
    parted = result["parted"]
    print(f"gradoc diff: {result['explanation']}")
    if parted:
        for x in parted["others_at_step"]:
            print(
                f"  also at step {parted['step']}: {x['layer']} {x['statistic']} x{x['ratio']:.3g}"
            )
    print(
        f"  {result['steps_compared']} steps compared; median loss difference "
        f"{(result['loss_rel_diff_median'] or 0):.1%}"
    )
    return 0


def _amp_compare(args: argparse.Namespace) -> int:
    from rich.console import Console

    from ._runner import check_script
    from .report import print_amp_compare, to_json_text
    from .tools.amp_compare import compare

    script = check_script(args.script)
    _check_json_path(args.json)
    if args.steps < 1:
        raise UsageError("--steps must be >= 1")
    dtype = args.dtype
    if dtype is None:
        import torch

        dtype = "fp16" if torch.cuda.is_available() else "bf16"
    with Console(stderr=True).status(f"running {script.name} twice: fp32 and {dtype} autocast"):
        result = compare(script, list(args.args), args.steps, dtype, args.tolerance)
    if args.json:
        Path(args.json).write_text(to_json_text(result))
    print_amp_compare(result)
    return 0


def _checkpoint_plan(args: argparse.Namespace) -> int:
    from rich.console import Console

    from ._runner import check_script
    from .report import print_checkpoint_plan
    from .tools.checkpointing import capture_first_step, plan_checkpointing

    script = check_script(args.script)
    console = Console(stderr=True)
    with console.status(f"running {script.name} to its first optimizer step"):
        model, inputs, kwargs = capture_first_step(script, list(args.args))
    with console.status("measuring blocks and checkpointing settings"):
        plan = plan_checkpointing(
            model, inputs, blocks=args.blocks, kwargs=kwargs, repeats=args.repeats
        )
    budget = args.budget * 2**20 if args.budget else None
    page = plan.write(args.out, budget)
    print_checkpoint_plan(plan.to_json() | {"recommended": plan.recommend(budget)}, budget)
    print(f"plan     {page}  (and checkpoint-plan.png, .json)")
    return 0


def _fix_command(args: argparse.Namespace) -> int:
    from ._runner import check_script
    from .report import build_report
    from .store import open_run

    script = check_script(args.script)
    _check_json_path(args.json)
    before = Path(args.run_dir)
    with open_run(before) as log:  # a clear error when RUN_DIR is not a run
        report = build_report(log)
    return _fix(before, report, script, list(args.args), args.out, args.json)


def _fix(
    before: Path,
    report: dict[str, Any],
    script: Path,
    script_args: list[str],
    out: str | None,
    json_path: str | None,
) -> int:
    """Apply the top no-code fix of ``report``, re-run the script, print before/after."""
    from rich.console import Console

    from .collect import prepare_run_dir
    from .fix import choose, code_fixes, compare
    from .fix.remedy import user_sources
    from .report import print_comparison, to_json_text

    console = Console(stderr=True)
    sources = user_sources(script)
    remedy = choose(report)
    fixes = code_fixes(report, sources)
    if report["status"] == "healthy":
        console.print("gradoc fix: the run is healthy; nothing to fix")
        return 0
    if remedy is None:
        console.print("gradoc fix: every fix of this diagnosis needs a code change:")
        print_comparison(None, None, fixes, console)
        return 0
    after = prepare_run_dir(out or _sibling(before), script.stem)
    console.print(f"gradoc fix: re-running {script.name} with {remedy.describe()} -> {after}")
    code, after_report = _execute(
        script, script_args, after, None, remedy.guard, remedy.lr_scale, None
    )
    if after_report is None:
        return code
    result = compare(before, report, after, after_report)
    left = {(f["kind"], f["layer"]) for f in result["remaining"] + result["new"]}
    fixes = [f for f in fixes if (f.finding, f.layer) in left]  # what the re-run did not cure
    result["remedy"] = remedy.to_json()
    result["code_fixes"] = [f.to_json() for f in fixes]
    text = to_json_text(result)
    (after / "fix.json").write_text(text)
    if json_path:
        Path(json_path).write_text(text)
    print_comparison(result, remedy, fixes, console)
    return code


def _sibling(before: Path) -> Path:
    """``RUN_DIR-fixed`` (``-fixed-2``, ... when taken)."""
    base = before.with_name(before.name + "-fixed")
    path, i = base, 2
    while (path / "run.db").exists():
        path, i = base.with_name(f"{base.name}-{i}"), i + 1
    return path


def _replay_if_needed(
    out: Path, script: Path, script_args: list[str], code: int, args: argparse.Namespace
) -> dict[str, Any] | None:
    """Re-run the script up to a non-finite step that was not located (see gradoc._replay)."""
    import subprocess
    import tempfile

    from .report import write_report
    from .store import open_run
    from .store.writer import append_event

    with open_run(out) as log:
        events, meta = log.events, log.meta
    origins = [e.data["origin"] for e in events if e.kind == "nonfinite_origin"]
    if any(o.get("file") or o.get("phase") in ("input", "optimizer") for o in origins):
        return None  # located already (bad inputs and bad weights have no line to find)
    bad = [e.step for e in events if e.kind in ("nonfinite_loss", "nonfinite_grad")]
    if bad:
        step = min(s for s in bad if s is not None)
    elif meta.get("ended_mid_step") and code != 0:
        step = int(meta.get("steps") or 0)  # stopped inside this step: perhaps at a NaN check
    else:
        return None
    print(
        f"gradoc: re-running {script.name} up to step {step} to find where the NaN was born "
        f"(at most {args.replay_budget:g} s; --replay-budget 0 turns this off)",
        file=sys.stderr,
    )
    with tempfile.TemporaryDirectory() as tmp:
        result_path = Path(tmp) / "result.json"
        cmd = [
            sys.executable,
            "-m",
            "gradoc._replay",
            "--step",
            str(step),
            "--result",
            str(result_path),
            str(script),
            *script_args,
        ]
        try:
            subprocess.run(
                cmd,
                timeout=args.replay_budget,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired:
            append_event(
                out / "run.db",
                step,
                "replay_timeout",
                f"the replay did not reach step {step} within {args.replay_budget:g} s",
                {},
            )
            return write_report(out, args.json)
        result = json.loads(result_path.read_text()) if result_path.exists() else {}
    origin: dict[str, Any] | None = result.get("origin")
    if origin is None:
        return None
    origin["note"] = (
        f"the script ended at step {step} before gradoc could locate it; gradoc re-ran "
        f"it with every RNG seeded and tracing armed at step {step}"
    )
    append_event(
        out / "run.db",
        step,
        "nonfinite_origin",
        f"{origin['phase']}: {origin['op']} ({origin['file']}:{origin['line']}) [replayed]",
        {"origin": origin},
    )
    return write_report(out, args.json)


def print_run_summary(out: Path, report: dict[str, Any], stderr: bool = True) -> None:
    """The diagnosis at the end of a run; on stderr by default, so it survives `> log`."""
    from rich.console import Console

    from .report import print_summary
    from .store import open_run

    with open_run(out) as log:
        print_summary(log, report, Console(stderr=stderr))


def _report(args: argparse.Namespace) -> int:
    from .report import build_report, print_summary, to_json_text
    from .store import open_run

    with open_run(args.run_dir) as log:
        report = build_report(log)
        if args.html:
            from .report.html import write_html

            _check_json_path(args.html)
            write_html(log, report, args.html)
        if args.json:
            print(to_json_text(report), end="")
        else:
            print_summary(log, report)
    failing = {"warning": ("warning", "error"), "error": ("error",)}.get(args.fail_on or "", ())
    return FAIL_EXIT if any(f["severity"] in failing for f in report["findings"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
