"""Does ``gradoc fix`` repair a bug, and is the repaired run as good as a healthy one?

Each folder of ``benchmarks/bugs/`` is a small program written as users write them (a
``train.py`` with its flags, a ``model.py``, a ``data.py`` that makes its data) holding one
bug of one kind of fix, and a ``bug.json``: the finding the bug should raise (``finding``, or
a list of those a right diagnosis may lead with; null with a ``why`` where gradoc cannot
diagnose it) and the hand-written fix
(``healthy``: ``[file, old, new]`` replacements) that makes the healthy program; a bug set
by the command rather than the code has its flags in ``args`` and the healthy command's in
``healthy_args`` (``gradoc fix`` is given the same flags as the buggy run).

For each bug, in a temporary copy (the folder here is never written):

1. the healthy program runs under ``gradoc run``: its loss is the bar to meet;
2. the buggy program runs under ``gradoc run``: the finding must be among its serious ones;
3. ``gradoc fix RUN train.py`` re-runs it with the fix gradoc chooses (an edit where it
   writes one), and its ``fix.json`` gives the verdict.

A bug is **repaired** when the fix is verified, the fixed run has no warning or error, and
its loss (the median of the last tenth of its steps) is no worse than the healthy run's
within ``NOISE`` (10%, and 0.01 absolute for a loss near 0). An edit that changes what the
loss computes (a log-softmax for a softmax) is measured against the healthy program, which
computes the same.

    python benchmarks/fixes.py                 # every bug, the table
    python benchmarks/fixes.py lm_pad_labels   # some of them
    python benchmarks/fixes.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BUGS = Path(__file__).resolve().parent / "bugs"
NOISE = 0.10
NEAR_ZERO = 0.01
GRADOC = [sys.executable, "-m", "gradoc"]


def _gradoc(args: list[str], cwd: Path, log: Path) -> int:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with log.open("a") as out:
        proc = subprocess.run(
            [*GRADOC, *args], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    return proc.returncode


def _copy(src: Path, dest: Path, replacements: list[list[str]] | None = None) -> Path:
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", "bug.json"))
    for file, old, new in replacements or []:
        path = dest / file
        text = path.read_text()
        if old not in text:
            raise SystemExit(f"{src.name}/bug.json: {old!r} is not in {file}")
        path.write_text(text.replace(old, new, 1))
    return dest


def _report(run: Path) -> dict[str, Any]:
    """The run's status, its serious findings and its loss (the median of the last tenth of
    its finite losses, as ``fix.json`` measures it)."""
    from gradoc.analysis import analyze
    from gradoc.store import open_run

    with open_run(run) as log:
        report = analyze(log)
        finite = [v for v in log.scalar("loss").values if math.isfinite(v)]
    tail = finite[-max(1, len(finite) // 10) :]
    return {
        "status": report.status,
        "serious": [f.kind for f in report.serious],
        "loss": statistics.median(tail) if tail else None,
    }


def one(bug: Path, work: Path) -> dict[str, Any]:
    spec = json.loads((bug / "bug.json").read_text())
    log = work / f"{bug.name}.log"
    began = time.monotonic()
    healthy = _copy(bug, work / f"{bug.name}-healthy", spec["healthy"])
    flags, healthy_flags = spec.get("args", []), spec.get("healthy_args", [])
    _gradoc(["run", "--out", str(work / "healthy-run"), "train.py", *healthy_flags], healthy, log)
    bar = _report(work / "healthy-run")
    buggy = _copy(bug, work / bug.name)
    _gradoc(["run", "--out", str(work / "run"), "train.py", *flags], buggy, log)
    first = _report(work / "run")
    row: dict[str, Any] = {
        "bug": bug.name,
        "expected": spec["finding"],
        "found": first["serious"],
        "healthy": bar,
        "first": first,
    }
    expected = spec["finding"] if isinstance(spec["finding"], list) else [spec["finding"]]
    if not set(expected) & set(first["serious"]):
        row["result"] = "not diagnosed"
        row["why"] = spec.get("why", "the expected finding was not raised")
        row["seconds"] = round(time.monotonic() - began, 1)
        return row
    fix_json = work / "fix.json"
    code = _gradoc(
        ["fix", "--json", str(fix_json), str(work / "run"), "train.py", *flags], buggy, log
    )
    row["fix_exit"] = code
    if not fix_json.exists():
        row["result"] = "no fix run"
        row["why"] = "gradoc fix wrote no comparison: no fix it can make"
    else:
        fix = json.loads(fix_json.read_text())
        patch = fix.get("patch")
        row["fix"] = patch["action"] if patch else fix.get("remedy", {}).get("describe")
        row["verdict"] = fix.get("verdict") or ("remedy" if not patch else None)
        row["why_not"] = fix.get("why_not", [])
        after = fix["after"]
        row["after"] = {"status": after["status"], "loss": after["final_loss"]}
        row["result"] = _judged(row, bar, after)
    row["seconds"] = round(time.monotonic() - began, 1)
    return row


def _judged(row: dict[str, Any], bar: dict[str, Any], after: dict[str, Any]) -> str:
    if row["verdict"] not in ("verified", "remedy"):
        return "did not help"
    if after["status"] != "healthy":
        return "fixed run not healthy"
    loss, best = after["final_loss"], bar["loss"]
    if loss is None or best is None:
        return "no loss to compare"
    if loss > best + NOISE * abs(best) + NEAR_ZERO:
        return f"loss worse than healthy ({loss:.4g} > {best:.4g})"
    return "repaired"


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("bugs", nargs="*", help="folder names under benchmarks/bugs (default: all)")
    ap.add_argument("--json", type=Path, help="write the rows here")
    ap.add_argument("--keep", action="store_true", help="keep the working folders")
    args = ap.parse_args()
    names = args.bugs or sorted(p.name for p in BUGS.iterdir() if (p / "bug.json").exists())
    unknown = [n for n in names if not (BUGS / n / "bug.json").exists()]
    if unknown:
        print(f"fixes.py: no such bug program: {', '.join(unknown)}", file=sys.stderr)
        return 2
    rows = []
    root = Path(tempfile.mkdtemp(prefix="gradoc-fixes-"))
    try:
        for i, name in enumerate(names, 1):
            print(f"[{i}/{len(names)}] {name} ...", file=sys.stderr, flush=True)
            work = root / name
            work.mkdir()
            rows.append(one(BUGS / name, work))
            r = rows[-1]
            print(f"    {r['result']} ({r['seconds']} s)", file=sys.stderr, flush=True)
    finally:
        if args.keep:
            print(f"working folders kept in {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    _table(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    repaired = sum(r["result"] == "repaired" for r in rows)
    diagnosed = sum(r["result"] != "not diagnosed" for r in rows)
    print(f"\nrepaired {repaired} of {len(rows)} ({repaired} of {diagnosed} diagnosed)")
    return 0


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _table(rows: list[dict[str, Any]]) -> None:
    print("| bug | finding | fix gradoc chose | verdict | loss: bug / fixed / healthy | result |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        after = r.get("after") or {}
        losses = f"{_fmt(r['first']['loss'])} / {_fmt(after.get('loss'))} / "
        losses += _fmt(r["healthy"]["loss"])
        result = r["result"] + (f": {r['why']}" if r.get("why") else "")
        verdict = r.get("verdict") or "-"
        if r.get("why_not"):
            verdict += " (" + "; ".join(r["why_not"]) + ")"
        kinds = r["expected"] if isinstance(r["expected"], list) else [r["expected"]]
        finding = " or ".join(k for k in kinds if k) or "-"
        print(
            f"| {r['bug']} | {finding} | {r.get('fix') or '-'} | {verdict} | {losses} | {result} |"
        )


if __name__ == "__main__":
    sys.exit(main())
