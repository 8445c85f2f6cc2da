"""Golden reports: the terminal and JSON reports of three gallery scenarios, byte for byte.

A change to detection, diagnosis or rendering shows here as a diff against the files in
``tests/golden``. When the change is intended, regenerate them and review the diff with
``git diff tests/golden``:

    GRADOC_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py
"""

from __future__ import annotations

import difflib
import io
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from rich.console import Console

import gradoc
from gradoc.demo.gallery import GALLERY
from gradoc.report import Report, print_summary

GOLDEN = Path(__file__).parent / "golden"
SCENARIOS = ("dead-relu", "exploding-init", "padding-leak")
VOLATILE = {
    "started_at",
    "ended_at",
    "duration_s",
    "argv",
    "script",
    "dir",
    "path",
    "gradoc",
    "torch",
}
"""Report fields that differ from run to run (times, paths, versions)."""


def _normal(x: Any) -> Any:
    if isinstance(x, float):
        # NOTE: 6 significant digits: CPUs with other vector units reduce float32 in another
        # order (the last bits of a norm differ); a change of diagnosis differs far more
        return float(f"{x:.6g}")
    if isinstance(x, dict):
        return {k: "*" if k in VOLATILE else _normal(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_normal(v) for v in x]
    if isinstance(x, str):
        return re.sub(r"/\S*?pytest\S*|/tmp/\S+", "<tmp>", x)
    return x


def _terminal(run_dir: Path, report: dict[str, Any]) -> str:
    out = io.StringIO()
    console = Console(file=out, width=100, color_system=None, force_terminal=False)
    with gradoc.open_run(run_dir) as log:
        print_summary(log, Report.from_json(report), console)
    text = re.sub(r"[ \t]+\n", "\n", out.getvalue())
    text = re.sub(r"steps in [0-9.]+ ?[a-z]*", "steps in *", text)  # the wall time
    return _normal(text)  # type: ignore[no-any-return]


def _compare(path: Path, text: str) -> None:
    if os.environ.get("GRADOC_UPDATE_GOLDEN"):
        path.write_text(text)
        return
    want = path.read_text()
    if text != want:
        diff = difflib.unified_diff(
            want.splitlines(), text.splitlines(), str(path), "this run", lineterm=""
        )
        pytest.fail(f"{path.name} changed:\n" + "\n".join(diff), pytrace=False)


@pytest.mark.parametrize("name", SCENARIOS)
def test_report_matches_its_golden_file(tmp_path: Path, name: str) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the same float reductions wherever the suite runs
    try:
        run_dir = GALLERY[name].problem(tmp_path / "problem")
    finally:
        torch.set_num_threads(threads)
    report = json.loads((run_dir / "report.json").read_text())
    _compare(GOLDEN / f"{name}.json", json.dumps(_normal(report), indent=1, sort_keys=True) + "\n")
    _compare(GOLDEN / f"{name}.txt", _terminal(run_dir, report))
