"""report.json, schema ``gradoc.report/1``."""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from .._util.text import safe
from ..detect import History
from ..detect.signals import clip_factors
from ..diagnose import diagnose
from ..findings import check_all
from ..findings.log_incomplete import LogIncomplete
from ..store import EventKind, RunLog, open_run

REPORT_SCHEMA = "gradoc.report/1"


def build_report(run: RunLog, stopped: dict[str, Any] | None = None) -> dict[str, Any]:
    """The report of a run log as a JSON-ready dict.

    ``stopped``: the run log stopped recording before the run ended (a full disk); what
    the run knew in memory then (``error``, ``steps``, ``status``, ``exit_code``). The
    report then says what was not watched: it is never "healthy".
    """
    history = History.load(run)
    findings = diagnose(history, check_all(history))
    meta = run.meta
    if stopped is not None:
        meta = {**meta, "status": stopped["status"], "exit_code": stopped["exit_code"]}
        findings.append(LogIncomplete().stopped(run.num_steps, stopped))
    problems = any(f.severity in ("error", "warning") for f in findings)
    script = meta.get("script")
    unwatched = _not_watched(run) if run.num_steps == 0 else None
    status = "problems" if problems else ("not_watched" if unwatched else "healthy")
    return {
        "schema": REPORT_SCHEMA,
        "status": status,
        **({"not_watched": unwatched} if unwatched else {}),
        "run": {
            "script": script,
            "steps": run.num_steps,
            "duration_s": meta.get("duration_s"),
            "torch": meta.get("torch"),
            "gradoc": meta.get("gradoc"),
            "status": meta.get("status"),
            "exit_code": meta.get("exit_code"),
            "guard": meta.get("guard"),
            "steps_counted_by": meta.get("steps_counted_by") or [],
            "loss_read": loss_read(meta),
            "clipping": clipping(run),
            "unwatched": _unwatched(meta),
        },
        "findings": [f.to_json() for f in findings],
        **({"amp": _amp(meta["amp"])} if meta.get("amp") else {}),
    }


def loss_read(meta: dict[str, Any]) -> str | None:
    """How the run's loss was read, in one sentence (None before schema 4's logs)."""
    read = meta.get("loss_read")
    if not isinstance(read, dict):
        return None
    parts = ["the loss handed to backward()"]
    if read.get("returned"):
        parts[0] += f", computed and returned {read['returned']}"
    through = []
    if read.get("unscaled"):
        through.append(f"{read['unscaled']}'s loss scaling undone")
    division = meta.get("loss_division")
    if isinstance(division, dict) and division.get("by") is not None:
        by = f"{division['by']:g}"
        through.append(
            f"the division by {by} micro-batches (gradient accumulation) undone"
            if division.get("undone")
            else f"divided by {by} before backward() (kept: not the step's number of "
            "backward() calls)"
        )
    kind = read.get("kind") or {}
    if kind.get("fn") == "cross_entropy":
        what = f"a cross-entropy over {kind.get('classes', '?')} classes"
        if "ignore_index" in kind:
            what += f" (ignore_index {kind['ignore_index']})"
        if kind.get("label_smoothing"):
            what += ", label-smoothed"
        through.append(what)
    elif kind.get("fn"):
        through.append(str(kind["fn"]).replace("_", " "))
    elif kind.get("node"):
        through.append(f"autograd node {kind['node']}")
    if through:
        parts.append("read through: " + "; ".join(through))
    return "; ".join(parts)


def clipping(run: RunLog) -> dict[str, Any] | None:
    """The program's own gradient clipping: its function and threshold, and how often it
    bit (the norm it measured above the threshold) with the median factor it scaled by."""
    said = run.meta.get("clipping")
    if not isinstance(said, dict):
        return None
    factors = [f for _, f in clip_factors(run.scalar("clip_norm"), run.scalar("clip_max"))]
    bit = [f for f in factors if f < 1.0]
    return {
        **said,
        "steps": len(factors),
        "bit": len(bit),
        "median_factor": sorted(bit)[len(bit) // 2] if bit else None,
    }


def _unwatched(meta: dict[str, Any]) -> list[str]:
    """What of a run gradoc could not see, though it watched the steps."""
    out = []
    if meta.get("compiled"):
        out.append(
            "the outputs of the modules inside a torch.compile'd model (compiled code runs "
            "no per-module hook; gradoc watches the model's inputs, loss, gradients, "
            "weights and updates)"
        )
    return out


def _not_watched(run: RunLog) -> str:
    """Why a run has no step: it is never "healthy" (nothing was seen to be healthy)."""
    found = any(e.kind == EventKind.NONFINITE_ORIGIN for e in run.events)
    if found:  # the origin says where the NaN/Inf was born and how it was found
        checked = ""
    elif run.meta.get("check_numerics"):
        checked = "; --check numerics checked every operation: none made a NaN/Inf"
    else:
        checked = (
            "; `gradoc run --check numerics SCRIPT` checks every operation of a program "
            "that does not train"
        )
    if not run.params:
        return (
            "the program made no training step: gradoc counts one at each optimizer.step(), "
            "or, with no torch.optim optimizer, at each backward() or torch.autograd.grad() "
            "call, and saw none" + checked
        )
    return "the run ended before its first step finished: nothing was recorded" + checked


def _amp(amp: dict[str, Any]) -> dict[str, Any]:
    """The mixed-precision readiness summary (``--check amp``)."""
    from ..detect.precision import advice

    return {"sampled_steps": amp.get("activation_steps"), **advice(amp)}


def _clean(value: Any) -> Any:
    """JSON has no NaN/Inf: write them as the strings 'nan', 'inf', '-inf'."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def to_json_text(report: dict[str, Any]) -> str:
    """Strict JSON (no NaN literals), indented for people."""
    return json.dumps(_clean(report), indent=2, allow_nan=False) + "\n"


def write_report(
    run_dir: str | Path,
    json_path: str | Path | None = None,
    *,
    html: bool = True,
    stopped: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Build the report of ``run_dir`` and write ``run_dir/report.json`` (and ``json_path``)
    and ``run_dir/report.html`` (``stopped``: see :func:`build_report`)."""
    with open_run(run_dir) as run:
        report = build_report(run, stopped)
        if html:
            _write_html(run, report, Path(run_dir) / "report.html")
    text = to_json_text(report)
    targets = [Path(run_dir) / "report.json"]
    if json_path is not None:
        targets.append(Path(json_path))
    for target in targets:
        write_text_file(target, text)
    return report


def write_text_file(target: Path, text: str) -> bool:
    """Write ``text`` to ``target`` whole or not at all (a full disk, a read-only place:
    one line on stderr, no half-written file, no stray ``.tmp``); True when written."""
    if not target.is_file() and target.exists():  # /dev/null, /dev/full: write in place
        try:
            target.write_text(text)
            return True
        except OSError as exc:
            print(f"gradoc: could not write {safe(target)}: {_why(exc)}", file=sys.stderr)
            return False
    tmp = target.with_name(target.name + ".tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, target)  # readers never see a half-written report
        return True
    except OSError as exc:
        print(f"gradoc: could not write {safe(target)}: {_why(exc)}", file=sys.stderr)
        with contextlib.suppress(OSError):
            tmp.unlink()
        return False


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _write_html(run: RunLog, report: dict[str, Any], path: Path) -> None:
    """report.html; a chart that cannot be drawn costs the page, never the JSON report."""
    from .html import write_html

    tmp = path.with_name(path.name + ".tmp")
    try:
        write_html(run, report, tmp)
        os.replace(tmp, path)
    except Exception as exc:  # e.g. a full disk, or a chart failing on odd data
        why = _why(exc) if isinstance(exc, OSError) else f"{type(exc).__name__}: {safe(exc)}"
        print(f"gradoc: could not write {safe(path)}: {why}", file=sys.stderr)
        with contextlib.suppress(OSError):
            tmp.unlink()
