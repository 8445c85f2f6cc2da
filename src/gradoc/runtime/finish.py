"""What a closed run leaves besides its log: ``report.json`` and the sinks.

``collect`` hands the finished run's directory to a callback (``Run(finish=...)``), so the
live side imports neither the report nor the sinks; :func:`gradoc.watch`, ``gradoc run``
and the integrations give it :func:`write_outputs`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from .._util.text import safe
from ..store import Stopped


def write_outputs(
    run_dir: Path,
    json_path: str | Path | None,
    stopped: Stopped | None,
    sinks: dict[str, str],
) -> dict[str, Any]:
    """Write the report from the finished log, then each sink; the report as report.json
    holds it (what ``Run.close()`` returns)."""
    from ..report import write_report  # the report reads the finished log

    report = write_report(run_dir, json_path, stopped=stopped)
    for kind, target in sinks.items():
        try:
            from ..sinks import export

            export(kind, run_dir, target, report)
        except Exception as exc:  # a sink must not cost the run its report
            print(f"gradoc: could not write the {kind} sink: {safe(exc)}", file=sys.stderr)
    return report.to_json()
