"""The labelled scenario suite: every pathology found with the right kind and layer,
every healthy control silent."""

from __future__ import annotations

from pathlib import Path

import pytest

import gradoc
from gradoc.detect import History
from gradoc.findings import check_all
from tests.scenarios import HEALTHY, PATHOLOGIES


@pytest.mark.parametrize("name", sorted(PATHOLOGIES))
def test_pathology_is_diagnosed(name: str, tmp_path: Path) -> None:
    scenario, kind, layer = PATHOLOGIES[name]
    findings = check_all(History.load(gradoc.open_run(scenario(tmp_path / name))))
    found = {f.kind: f for f in findings}
    assert kind in found, [f.summary for f in findings]
    assert found[kind].layer == layer
    assert found[kind].severity in ("warning", "error")


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_healthy_control_raises_nothing(name: str, tmp_path: Path) -> None:
    findings = check_all(History.load(gradoc.open_run(HEALTHY[name](tmp_path / name))))
    assert [f.summary for f in findings if f.severity in ("warning", "error")] == []


def test_there_are_enough_scenarios() -> None:
    kinds = {kind for _, kind, _ in PATHOLOGIES.values()}
    assert kinds == {
        "nonfinite",
        "exploding_gradients",
        "vanishing_gradients",
        "dead_units",
        "saturated_units",
        "loss_spike",
        "loss_divergence",
        "loss_plateau",
        "poor_initialization",
        "large_updates",
        "tiny_updates",
    }
    assert len(PATHOLOGIES) + len(HEALTHY) >= 12 and len(HEALTHY) >= 4
