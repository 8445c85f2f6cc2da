"""``torchrun ... -m gradoc run``: one run log per rank, one merged report on rank 0.

Rank 0 writes its run log in the run directory, rank r in ``DIR/rank<r>``. With DDP every
rank's gradients are the all-reduced ones, so each rank's global norm is the true global
norm. After its own run, rank 0 waits (up to ``WAIT_S``) for the other ranks' reports and
merges them into ``DIR/report.json``: a finding seen on other ranks only, or whose origin
only another rank located (a NaN born on rank 1 reaches rank 0 through the all-reduce,
already made), is reported from that rank with ``"rank": r``.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import replace
from pathlib import Path

from ..analysis import Ranks, Report
from ..collect import prepare_run_dir, torchrun_out
from ..detect.finding import Finding

WAIT_S = 300.0


def rank_dir(out: str | None, stem: str, rank: int, resume: bool = False) -> Path:
    where = out if out is not None else torchrun_out(stem)  # one per job: it may be resumed
    return prepare_run_dir(where, rank=rank, resume=resume)


def _located(f: Finding) -> bool:
    o = f.origin
    return o is not None and (bool(o.file) or o.phase in ("input", "optimizer"))


def merge_ranks(base: Path, world: int, json_path: str | Path | None) -> Report:
    """Merge every rank's report.json into ``base/report.json`` (rank 0's run info)."""
    from ..report import to_json_text
    from ..report.json import read_report, write_text_file

    merged = read_report(base / "report.json")
    deadline = time.monotonic() + WAIT_S
    others: dict[int, Report] = {}
    while len(others) < world - 1 and time.monotonic() < deadline:
        for r in range(1, world):
            path = base / f"rank{r}" / "report.json"
            if r not in others and path.exists():
                with contextlib.suppress(json.JSONDecodeError):  # being written: next round
                    others[r] = read_report(path)
        if len(others) < world - 1:
            time.sleep(0.2)
    findings = list(merged.findings)
    by_kind = {f.kind: i for i, f in enumerate(findings)}
    for r, report in sorted(others.items()):
        for f in report.findings:
            i = by_kind.get(f.kind)
            if i is None:
                findings.append(replace(f, rank=r))
                by_kind[f.kind] = len(findings) - 1
            elif _located(f) and not _located(findings[i]):
                findings[i] = replace(f, rank=r)
    merged = merged.with_findings(findings, Ranks(world, [0, *sorted(others)]))
    text = to_json_text(merged)
    write_text_file(base / "report.json", text)
    if json_path:
        write_text_file(Path(json_path), text)
    return merged
