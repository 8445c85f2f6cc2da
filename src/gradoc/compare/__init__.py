"""compare: two run logs side by side (``gradoc diff RUN_A RUN_B``)."""

from .diff import Difference, Parting, RunDiff, diff_runs

__all__ = ["Difference", "Parting", "RunDiff", "diff_runs"]
