"""detect: pure functions of the recorded history that return findings.

Each detector lives in its own module and exposes ``check(history) -> list[Finding]``,
with its rule and the source of each threshold in the module docstring. ``DETECTORS``
lists them in the order they run; none depends on another's output.
"""

from __future__ import annotations

from collections.abc import Callable

from . import (
    accumulating,
    dead_units,
    exploding,
    frozen,
    large_updates,
    loss_blowup,
    loss_divergence,
    loss_plateau,
    loss_spike,
    nonfinite,
    padding,
    poor_initialization,
    precision,
    saturated_units,
    tiny_updates,
    vanishing,
)
from .finding import Finding
from .history import History, synthetic

Detector = Callable[[History], list[Finding]]

DETECTORS: dict[str, Detector] = {
    "nonfinite": nonfinite.check,
    "exploding_gradients": exploding.check,
    "vanishing_gradients": vanishing.check,
    "dead_units": dead_units.check,
    "saturated_units": saturated_units.check,
    "loss_spike": loss_spike.check,
    "loss_blowup": loss_blowup.check,
    "loss_divergence": loss_divergence.check,
    "loss_plateau": loss_plateau.check,
    "poor_initialization": poor_initialization.check,
    "large_updates": large_updates.check,
    "tiny_updates": tiny_updates.check,
    "fp16_overflow": precision.check_overflow,
    "fp16_underflow": precision.check_underflow,
    "padding": padding.check,
    "accumulating_gradients": accumulating.check,
    "frozen_parameters": frozen.check,
}

_SEVERITY = {"error": 0, "warning": 1, "info": 2}


def run_detectors(history: History) -> list[Finding]:
    """Every detector's findings, most severe first, then by step."""
    findings = [f for check in DETECTORS.values() for f in check(history)]
    return sorted(
        findings, key=lambda f: (_SEVERITY[f.severity], f.step if f.step is not None else -1)
    )


__all__ = ["DETECTORS", "Finding", "History", "run_detectors", "synthetic"]
