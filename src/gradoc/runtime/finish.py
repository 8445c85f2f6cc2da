"""What a closed run leaves besides its log: ``report.json`` and the sinks.

``collect`` hands the finished run's directory to a callback (``Run(finish=...)``), so the
live side imports neither the report nor the sinks; :func:`gradoc.watch`, ``gradoc run``
and the integrations give it :func:`write_outputs`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .._util.json_types import JsonObject
from .._util.text import safe
from ..store import Stopped

if TYPE_CHECKING:
    from ..analysis import Report


def write_outputs(
    run_dir: Path,
    json_path: str | Path | None,
    stopped: Stopped | None,
    sinks: dict[str, str],
) -> JsonObject:
    """:func:`finish_run`, returning the report as report.json holds it (what
    ``Run.close()`` returns)."""
    return finish_run(run_dir, json_path, stopped, sinks).to_json()


def finish_run(
    run_dir: Path,
    json_path: str | Path | None,
    stopped: Stopped | None,
    sinks: dict[str, str],
) -> Report:
    """Write the report from the finished log, then each sink; the typed report."""
    from ..report import write_report  # the report reads the finished log

    report = write_report(run_dir, json_path, stopped=stopped)
    for kind, target in sinks.items():
        try:
            from ..sinks import export

            export(kind, run_dir, target, report)
        except Exception as exc:  # a sink must not cost the run its report
            print(f"gradoc: could not write the {kind} sink: {safe(exc)}", file=sys.stderr)
    return report
