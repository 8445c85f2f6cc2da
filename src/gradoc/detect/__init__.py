"""detect: pure functions of the recorded history that return findings.

Each detector lives in its own module and exposes ``check(run: RunLog) -> list[Finding]``.
``DETECTORS`` lists them in the order they run.
"""

from __future__ import annotations

from collections.abc import Callable

from ..store import RunLog
from . import nonfinite
from .finding import Finding

Detector = Callable[[RunLog], list[Finding]]

DETECTORS: list[Detector] = [nonfinite.check]


def run_detectors(run: RunLog) -> list[Finding]:
    """Every detector's findings, errors first, then by step."""
    findings = [f for check in DETECTORS for f in check(run)]
    order = {"error": 0, "warning": 1, "info": 2}
    return sorted(findings, key=lambda f: (order[f.severity], f.step if f.step is not None else -1))


__all__ = ["DETECTORS", "Finding", "run_detectors"]
