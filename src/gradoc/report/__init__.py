"""report: render a run log as report.json, a terminal summary (rich) and report.html
(charts written as SVG by ``_svg``; matplotlib only for the checkpointing planner's figure)."""

from ..analysis import REPORT_SCHEMA, Report, analyze
from .json import build_report, read_report, to_json_text, write_report
from .terminal import (
    print_amp_compare,
    print_checkpoint_plan,
    print_comparison,
    print_run_summary,
    print_summary,
    status,
)

__all__ = [
    "REPORT_SCHEMA",
    "Report",
    "analyze",
    "build_report",
    "print_amp_compare",
    "print_checkpoint_plan",
    "print_comparison",
    "print_run_summary",
    "print_summary",
    "read_report",
    "status",
    "to_json_text",
    "write_report",
]
