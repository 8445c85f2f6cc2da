"""The gallery: every scenario's diagnosis, its fix's run, and `gradoc demo NAME`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gradoc.demo.gallery import GALLERY, Scenario
from tests.test_cli import gradoc_cli


def _report(run_dir: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((run_dir / "report.json").read_text())  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", GALLERY)
def test_scenario_is_diagnosed_and_its_fix_is_clean(tmp_path: Path, name: str) -> None:
    s: Scenario = GALLERY[name]
    top = _report(s.problem(tmp_path / "problem"))["findings"][0]
    assert (top["kind"], top["severity"] in ("error", "warning")) == (s.expect, True)
    if s.layer is not None:
        assert top["layer"] == s.layer
    if s.cause is not None:
        assert s.cause in top["root_cause"]
    fixed = _report(s.fixed(tmp_path / "fixed"))
    kinds = {f["kind"] for f in fixed["findings"] if f["severity"] in ("error", "warning")}
    if s.fixed_clean:
        assert fixed["status"] == "healthy", kinds
    else:
        assert kinds <= {s.expect}


def test_guarded_spike_is_clipped_and_trains_on_no_worse(tmp_path: Path) -> None:
    """The loss-spike scenario's fix: the guard clips the corrupted batch's gradient (Adam
    already bounds the damage of one step, so the gain here is modest: the fault-injection
    test in test_guard.py shows what the guard saves under SGD)."""
    import statistics

    import gradoc

    plain = gradoc.open_run(GALLERY["loss-spike"].problem(tmp_path / "p")).scalar("loss")
    guarded_dir = GALLERY["loss-spike"].fixed(tmp_path / "g")
    guarded = gradoc.open_run(guarded_dir).scalar("loss")
    after = slice(151, 171)
    assert statistics.fmean(guarded.values[after]) <= statistics.fmean(plain.values[after])
    assert 150 in {e.step for e in gradoc.open_run(guarded_dir).events if e.kind == "clipped"}


def test_demo_list_and_a_gallery_scenario_from_the_command_line(tmp_path: Path) -> None:
    listed = gradoc_cli("demo", "--list")
    assert listed.returncode == 0
    for name in ["nan-posenc", *GALLERY]:
        assert name in listed.stdout
    done = gradoc_cli("demo", "dead-relu", "--out", str(tmp_path / "d"))
    assert done.returncode == 0, done.stderr
    assert "dead_units" in done.stdout and "before / after" in done.stdout
    assert (tmp_path / "d" / "report.html").exists()
    assert (tmp_path / "d-fixed" / "report.html").exists()
