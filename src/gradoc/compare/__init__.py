"""compare: two run logs side by side (``gradoc diff RUN_A RUN_B``)."""

from .diff import diff_runs

__all__ = ["diff_runs"]
