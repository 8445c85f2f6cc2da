"""report: render a run log as report.json and as a terminal summary.

This package is the only one that imports rich.
"""

from .json import REPORT_SCHEMA, build_report, to_json_text, write_report
from .terminal import print_comparison, print_summary

__all__ = [
    "REPORT_SCHEMA",
    "build_report",
    "print_comparison",
    "print_summary",
    "to_json_text",
    "write_report",
]
