"""NaN/Inf bugs people write, each located to the exact op, module and line."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import gradoc
from gradoc.locate import origin_in_graph
from tests import bugs
from tests.bugs import BUGS, SeqModel, line_of


def run(
    tmp_path: Path,
    model: nn.Module | list[nn.Module],
    opt: torch.optim.Optimizer,
    step: Callable[[int], torch.Tensor],
    steps: int = 8,
    **options: Any,
) -> dict[str, Any]:
    """Train under gradoc.watch; return the origin the report gives its nonfinite story."""
    with gradoc.watch(model, opt, out=tmp_path / "run", **options) as r:
        for s in range(steps):
            opt.zero_grad()
            step(s).backward()
            opt.step()
    report = json.loads((r.dir / "report.json").read_text())
    story = next(f for f in report["findings"] if f.get("origin"))
    assert story["kind"] == "nonfinite" or "nonfinite" in {x["kind"] for x in story["related"]}
    origin: dict[str, Any] = story["origin"]
    return origin


@pytest.mark.parametrize("name", sorted(BUGS))
def test_bug_is_located(name: str, tmp_path: Path) -> None:
    bug = BUGS[name]
    torch.manual_seed(0)
    model, opt, step = bug.make()
    origin = run(tmp_path, model, opt, step, skip_nonfinite_updates=bug.skip or None)
    assert origin["phase"] == bug.phase, origin
    if bug.op is not None:
        assert origin["op"] == bug.op, origin
    if bug.phase in ("forward", "backward"):
        assert origin["module"] == bug.module, origin
    if bug.marker is not None:
        assert origin["file"] == str(bugs.HERE) and origin["line"] == line_of(bug.marker), origin
    if bug.step is not None:
        assert origin["step"] == bug.step, origin


def test_operand_evidence(tmp_path: Path) -> None:
    def evidence(name: str) -> dict[str, Any]:
        torch.manual_seed(0)
        model, opt, step = BUGS[name].make()
        return {e["signal"]: e for e in run(tmp_path / name, model, opt, step)["evidence"]}

    assert evidence("length-1 sequence: 0/0")["zeros in the denominator"]["value"] == 1
    assert evidence("exp overflow")["exp argument max"]["value"] > 88
    assert evidence("0 * inf")["0 * inf positions"]["value"] > 0
    assert evidence("negative pow")["negative bases"]["value"] > 0
    assert evidence("fp16 overflow")["dtype"]["value"] == "float16"
    nan_input = evidence("nan input")
    assert nan_input["non-finite values in the input batch"]["value"] == 3
    assert nan_input["feature with the most"]["value"] == 3
    assert nan_input["samples affected"]["value"] == 3


def test_notes_say_how_the_origin_was_found(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, opt, step = BUGS["log(0) in the loss"].make()
    assert "tracing armed" in run(tmp_path / "a", model, opt, step)["note"]
    torch.manual_seed(0)
    model, opt, step = BUGS["huge lr"].make()
    assert "consequence" in run(tmp_path / "b", model, opt, step)["note"]


def test_healthy_training_is_untouched_by_locate(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), 0.01)
    with gradoc.watch(model, opt, out=tmp_path / "run") as r:
        for _ in range(20):
            opt.zero_grad()
            model(torch.randn(8, 4)).pow(2).mean().backward()
            opt.step()
    log = gradoc.open_run(r.dir)
    assert [e.kind for e in log.events] == [] and log.meta["skipped_updates"] == 0


def test_corrupted_updates_are_applied_unless_skipping_is_asked(tmp_path: Path) -> None:
    def train(**options: Any) -> torch.Tensor:
        torch.manual_seed(0)
        model = nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), 0.1)
        with gradoc.watch(model, opt, out=tmp_path / str(options), **options):
            for s in range(4):
                opt.zero_grad()
                loss = model(torch.randn(4, 3)).pow(2).mean() * (math.nan if s == 2 else 1.0)
                loss.backward()
                opt.step()
        return model.weight.detach()

    assert not torch.isfinite(train()).all()  # gradoc only observes by default
    assert torch.isfinite(train(skip_nonfinite_updates=True)).all()
    log = gradoc.open_run(tmp_path / "{'skip_nonfinite_updates': True}")
    assert log.meta["skipped_updates"] == 1 and "skipped_update" in [e.kind for e in log.events]
    assert gradoc.open_run(tmp_path / "{}").meta["skipped_updates"] == 0


@pytest.mark.parametrize("locate", [True, False])
def test_locate_can_be_turned_off(tmp_path: Path, locate: bool) -> None:
    torch.manual_seed(0)
    model = SeqModel()
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    with gradoc.watch(model, opt, out=tmp_path / "run", locate=locate) as r:
        for s in range(3):
            opt.zero_grad()
            lengths = torch.tensor([5, 1 if s == 1 else 2])
            F.cross_entropy(model(torch.randn(2, 5, 8), lengths), torch.tensor([0, 1])).backward()
            opt.step()
    kinds = [e.kind for e in gradoc.open_run(r.dir).events]
    assert ("nonfinite_origin" in kinds) is locate


def run_script(tmp_path: Path, source: str) -> tuple[Path, Any, dict[str, Any]]:
    """`gradoc run` a script; return it, the finished process and the located origin."""
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(source)
    done = subprocess.run(
        [sys.executable, "-m", "gradoc", "run", "--out", str(tmp_path / "run"), str(script)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    report = json.loads((tmp_path / "run/report.json").read_text())
    found = [f for f in report["findings"] if f.get("origin")]
    # the run's own words when no origin came back (a rare failure, so far unexplained)
    assert len(found) == 1, f"rc {done.returncode}\n{done.stderr[-4000:]}\n{report['findings']}"
    return script, done, found[0]["origin"]


EXITS_AT_FIRST_NAN = """
import sys, torch, torch.nn as nn, torch.nn.functional as F

class Gate(nn.Module):
    def forward(self, x):
        return x / x.abs().amax(-1, keepdim=True)  # 0/0 for an all-zero row

model = nn.Sequential(nn.Linear(4, 4, bias=False), Gate(), nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), 0.01)
for step in range(20):
    x = torch.randn(8, 4)
    if step == 5:
        x[2] = 0.0
    loss = model(x).pow(2).mean()
    if torch.isnan(loss):
        print("loss is NaN, stopping")
        sys.exit(1)
    opt.zero_grad(); loss.backward(); opt.step()
"""


def test_a_script_that_exits_at_the_first_nan(tmp_path: Path) -> None:
    script, done, origin = run_script(tmp_path, EXITS_AT_FIRST_NAN)
    assert done.returncode == 1 and "stopping" in done.stdout
    assert (origin["phase"], origin["op"], origin["module"]) == ("forward", "aten.div.Tensor", "1")
    assert origin["file"] == str(script) and origin["line"] == 6 and origin["step"] == 5
    assert "stopped during step 5" in origin["note"]


LOSS_NAN_THEN_EXIT = """
import sys, torch, torch.nn as nn

model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
opt = torch.optim.SGD(model.parameters(), 0.01)
for step in range(30):
    x = torch.randn(8, 4)
    probs = model(x).sum(-1)
    if step == 6:
        probs = probs * 0  # a batch where every probability is 0
    loss = -torch.log(probs).mean()
    if not torch.isfinite(loss):
        raise RuntimeError(f"non-finite loss at step {step}")
    opt.zero_grad(); loss.backward(); opt.step()
"""


def test_a_script_that_stops_at_a_nan_born_outside_the_model_is_replayed(tmp_path: Path) -> None:
    script, done, origin = run_script(tmp_path, LOSS_NAN_THEN_EXIT)
    assert done.returncode == 1 and "non-finite loss at step 6" in done.stderr
    assert "re-running train.py up to step 6" in done.stderr
    assert (origin["phase"], origin["op"], origin["module"]) == (
        "forward",
        "aten.log.default",
        None,
    )
    assert origin["file"] == str(script) and origin["line"] == 11 and origin["step"] == 6
    assert "re-ran it with every RNG seeded" in origin["note"]


class _Gate(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / x.abs().amax(-1, keepdim=True)  # 0/0 for an all-zero row


def _gated_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scaled: bool) -> dict[str, Any]:
    """A NaN born at step 5 on an accelerator: each step's vitals travel with its statistics
    (read every 4 steps here), none is read before its update."""
    from gradoc.collect.step.transfers import Transfers

    monkeypatch.setattr(
        Transfers, "checks_now", lambda self: self.synced or self.steps.guard is not None
    )
    monkeypatch.setattr(Transfers, "_cadence", lambda self, took: 4)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4, bias=False), _Gate(), nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), 0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=1.0) if scaled else None
    with gradoc.watch(model, opt, out=tmp_path / "run") as r:
        for s in range(12):
            x = torch.randn(8, 4)
            if s == 5:
                x[2] = 0.0
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            if scaler is None:
                loss.backward()
                opt.step()
            else:  # the scaler skips the NaN step's update: the weights stay finite
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
        assert r.steps.transfers.synced  # every step after the late read is read at once
    log = gradoc.open_run(r.dir)
    assert log.num_steps == 12 and len(log.scalar("grad_norm").steps) == 12
    report = json.loads((r.dir / "report.json").read_text())
    story = next(f for f in report["findings"] if f.get("origin"))
    origin: dict[str, Any] = story["origin"]
    return origin


def test_a_step_read_after_its_update_is_replayed_from_its_inputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    origin = _gated_run(tmp_path, monkeypatch, scaled=True)
    assert (origin["phase"], origin["op"], origin["module"]) == ("forward", "aten.div.Tensor", "1")
    assert origin["step"] == 5 and origin["file"] == __file__
    assert origin["line"] == _Gate.forward.__code__.co_firstlineno + 1
    assert "read at step 8" in origin["note"] and "weights of step 8" in origin["note"]


def test_a_step_read_after_its_update_wrote_nan_weights_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    origin = _gated_run(tmp_path, monkeypatch, scaled=False)
    assert origin["step"] == 5 and origin["op"] is None
    assert "could not be replayed" in origin["note"]
    assert "skip_nonfinite_updates=True" in origin["note"]


# -- the loss's own autograd graph, read at backward() (no replay) ---------------------------
# (origin_in_graph reads the variables of the innermost frame of user code: the test's own)


def test_the_graph_names_a_division_by_a_norm_of_zero_and_its_line() -> None:
    w = torch.randn(4, 3, requires_grad=True)
    rows = w * torch.tensor([0.0, 1.0, 1.0, 1.0]).unsqueeze(1)
    unit = rows / rows.norm(dim=1, keepdim=True)
    loss = unit.sum() * 2
    origin = origin_in_graph(loss, step=7)
    assert origin is not None and (origin.phase, origin.op, origin.step) == ("forward", "div", 7)
    assert origin.code == "unit = rows / rows.norm(dim=1, keepdim=True)", origin
    zeros = next(e for e in origin.evidence if e.signal.startswith("values of the divisor"))
    assert (zeros.value, zeros.extra["of"]) == (1, 4)
    assert any(e.value == "rows" for e in origin.evidence if e.signal == "div operand")


def test_the_graph_names_an_operand_that_entered_already_non_finite() -> None:
    """A tensor computed without gradient (an advantage normalised over one value) is no
    node of the graph: the variable that holds it is named, with the line that assigned it."""
    w = torch.randn(3, requires_grad=True)
    with torch.no_grad():
        adv = torch.tensor([2.0])
        adv = (adv - adv.mean()) / adv.std()
    loss = -(w.sum() * adv).mean()
    origin = origin_in_graph(loss, step=7)
    assert origin is not None and origin.op == "std or div", origin
    assert origin.code == "adv = (adv - adv.mean()) / adv.std()"
    assert origin.note is not None and "`adv` was already non-finite" in origin.note


def test_the_graph_leaves_weights_written_non_finite_to_the_optimizer_pass() -> None:
    w = torch.randn(3, requires_grad=True)
    with torch.no_grad():
        w[0] = float("nan")
    assert origin_in_graph((w * 2).sum(), step=7) is None


def test_the_graph_recomputes_a_log_of_zero_no_consumer_saved() -> None:
    p = torch.tensor([0.5, 0.0, 0.25], requires_grad=True)
    q = p * 1.0
    loss = torch.log(q).sum()  # sum saves nothing of its input: the log is recomputed
    origin = origin_in_graph(loss, step=7)
    assert origin is not None and origin.op == "log", origin
    bad = next(e for e in origin.evidence if e.signal.startswith("values of the argument"))
    assert bad.value == 1
