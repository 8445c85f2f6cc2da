"""Errors gradoc reports to people: each renders as one clear line."""

from __future__ import annotations


class GradocError(Exception):
    """A problem with what gradoc was asked to do; ``str()`` is the one-line message."""

    exit_code = 1


class UsageError(GradocError):
    """Bad command-line input (missing script, unusable ``--out``)."""

    exit_code = 2


class RunLogError(GradocError):
    """A run directory or ``run.db`` that cannot be read as a gradoc run log."""
