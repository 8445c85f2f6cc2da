"""report.json (schema ``gradoc.report/1``): the one place a typed :class:`Report` is
written to the file and read back."""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._util.json_types import JsonObject
from .._util.text import safe
from ..analysis import Report, analyze
from ..store import RunLog, Stopped, open_run


def build_report(run: RunLog, stopped: Stopped | None = None) -> JsonObject:
    """The report of a run log as report.json holds it (:func:`gradoc.analysis.analyze`)."""
    return analyze(run, stopped).to_json()


def read_report(path: str | Path) -> Report:
    """A report.json read back (another rank's, a finished run's)."""
    return Report.from_json(json.loads(Path(path).read_text()))


def _clean(value: Any) -> Any:
    """JSON has no NaN/Inf: write them as the strings 'nan', 'inf', '-inf'."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def to_json_text(data: Report | Mapping[str, Any]) -> str:
    """Strict JSON (no NaN literals), indented for people: report.json's text, or another
    of gradoc's results (a diff, a comparison)."""
    plain = data.to_json() if isinstance(data, Report) else data
    return json.dumps(_clean(plain), indent=2, allow_nan=False) + "\n"


def write_report(
    run_dir: str | Path,
    json_path: str | Path | None = None,
    *,
    html: bool = True,
    stopped: Stopped | None = None,
) -> Report:
    """Analyse ``run_dir`` and write ``run_dir/report.json`` (and ``json_path``) and
    ``run_dir/report.html`` (``stopped``: see :func:`gradoc.analysis.analyze`)."""
    with open_run(run_dir) as run:
        report = analyze(run, stopped)
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


def _write_html(run: RunLog, report: Report, path: Path) -> None:
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
