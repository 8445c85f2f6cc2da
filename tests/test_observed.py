"""gradoc sees what real programs compute, and changes nothing by default.

The shapes that made reports wrong on public programs, each as a script of our own in
tests/observed/ run unchanged: a program that fails because of a NaN fails the same way
under gradoc; a NaN loss the program checks and never backpropagates is not "healthy";
the gradient norms logged are the ones before the program's clipping; the loss is read
through a loss returned by forward(), gradient accumulation's division, a GradScaler and
label smoothing; the first step's activations are recorded under `gradoc run`; padding is
audited where Hugging Face models take it (keyword inputs, `labels`, a ModelOutput).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import gradoc
from gradoc.collect.graph import losses

OBSERVED = Path(__file__).parent / "observed"


def python(tmp_path: Path, script: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, str(OBSERVED / script), *args],
        capture_output=True,
        timeout=300,
        cwd=tmp_path,
    )


def gradoc_run(
    tmp_path: Path, script: str, *args: str, options: tuple[str, ...] = ()
) -> tuple[subprocess.CompletedProcess[bytes], dict[str, Any]]:
    out = tmp_path / "run"
    command = [sys.executable, "-m", "gradoc", "run", "--out", str(out), *options]
    tmp_path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [*command, str(OBSERVED / script), *args],
        capture_output=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert (out / "report.json").exists(), done.stderr.decode()
    return done, json.loads((out / "report.json").read_text())


def headline(report: dict[str, Any]) -> dict[str, Any]:
    return next(f for f in report["findings"] if f["severity"] in ("error", "warning"))


# -- the default observes only ------------------------------------------------------------
@pytest.mark.parametrize(
    ("script", "line"),
    [
        # sqrt((p ** 2).sum()) over zero-initialised biases: NaN gradients from step 0
        (
            "char_lm_l2_sqrt.py",
            "penalty = sum(torch.sqrt((p**2).sum()) for p in model.parameters())",
        ),
        # the std of a one-sample minibatch: a NaN advantage, then NaN weights, then a crash
        (
            "ppo_one_sample_std.py",
            "adv = (adv - adv.mean()) / adv.std()  # one sample: std() is NaN",
        ),
    ],
)
def test_a_program_failing_on_a_nan_fails_the_same_way_and_gradoc_says_why(
    tmp_path: Path, script: str, line: str
) -> None:
    plain = python(tmp_path, script)
    watched, report = gradoc_run(tmp_path, script)
    assert plain.returncode == 1
    assert watched.returncode == plain.returncode
    assert watched.stdout == plain.stdout  # byte for byte
    assert b"nan" in plain.stdout
    top = headline(report)
    assert top["kind"] == "nonfinite"
    assert top["origin"]["code"] == line
    log = gradoc.open_run(tmp_path / "run")
    assert log.meta["skipped_updates"] == 0
    assert "skipped_update" not in [e.kind for e in log.events]


# -- a non-finite loss that never reaches backward() --------------------------------------
def test_a_nan_loss_the_loop_checks_and_stops_at_is_located_not_healthy(tmp_path: Path) -> None:
    """A hand-written binary cross-entropy: `if not torch.isfinite(loss): break`."""
    plain = python(tmp_path, "bce_by_hand_stops.py")
    done, report = gradoc_run(tmp_path, "bce_by_hand_stops.py")
    assert done.returncode == plain.returncode == 0 and done.stdout == plain.stdout
    assert b"step 33: loss is nan, stopping" in plain.stdout
    assert report["status"] == "problems"
    top = headline(report)
    assert (top["kind"], top["step"]) == ("nonfinite", 33)
    origin = top["origin"]  # the fallback re-ran the script up to step 33, traced
    assert (origin["op"], origin["phase"]) == ("aten.log.default", "forward")
    assert origin["module"] is None  # the loss is written in the loop
    assert origin["code"] == "loss = -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()"
    # and the first step's activations were recorded, though the model was found after it
    log = gradoc.open_run(tmp_path / "run")
    assert log.activation("1", "zero_frac").steps[:2] == [0, 10]


def test_without_the_fallback_the_unbackpropagated_nan_is_still_the_headline(
    tmp_path: Path,
) -> None:
    _, report = gradoc_run(tmp_path, "bce_by_hand_stops.py", options=("--replay-budget", "0"))
    top = headline(report)
    assert (top["kind"], top["step"]) == ("nonfinite", 33)
    signal = next(e for e in top["evidence"] if e["signal"] == "loss, never a step's loss")
    assert (signal["step"], signal["value"]) == (33, "nan")
    assert "checked with torch.isfinite(loss), never backpropagated" in top["summary"]


def test_an_objective_printed_and_exited_on_before_autograd_grad_is_located(
    tmp_path: Path,
) -> None:
    """The published NaN-report shape: raw tensors, torch.autograd.grad, exit 0 at the
    first non-finite objective, after printing it."""
    plain = python(tmp_path, "logreg_grad_exits.py")
    done, report = gradoc_run(tmp_path, "logreg_grad_exits.py")
    assert done.returncode == plain.returncode == 0 and done.stdout == plain.stdout
    top = headline(report)
    assert (top["kind"], top["step"]) == ("nonfinite", 397)
    assert top["origin"]["op"] == "aten.log.default"
    assert top["origin"]["code"].startswith("objective = -(y * torch.log(torch.sigmoid(z))")
    assert "large_updates" not in [f["kind"] for f in report["findings"]][:1]


CHECKS: dict[str, Callable[[torch.Tensor], bool]] = {
    "torch.isfinite": lambda loss: not torch.isfinite(loss),
    "torch.isnan": lambda loss: bool(torch.isnan(loss)),
    "loss.isinf": lambda loss: bool(loss.isnan() | loss.isinf()),
    "item": lambda loss: math.isnan(loss.item()),
    "float": lambda loss: math.isnan(loss),  # type: ignore[arg-type]
    "format": lambda loss: f"{loss:.4f}" == "nan",
    "print": lambda loss: print(loss) is None and "nan" in str(loss),
}


@pytest.mark.parametrize("check", list(CHECKS))
def test_a_nonfinite_loss_computed_but_never_backpropagated_is_never_healthy(
    tmp_path: Path, check: str
) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    stopped = None
    with gradoc.watch(model, opt, out=tmp_path / "run") as run:
        for step in range(20):
            x = torch.randn(16, 4)
            scale = math.nan if step == 12 else 1.0
            loss = F.mse_loss(model(x), x.sum(1, keepdim=True)) * scale
            if CHECKS[check](loss):
                stopped = step
                break
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert stopped == 12
    report = json.loads((run.dir / "report.json").read_text())
    assert report["status"] == "problems"
    top = headline(report)
    assert (top["kind"], top["step"]) == ("nonfinite", 12)
    assert "never backpropagated" in top["summary"]
    assert gradoc.open_run(run.dir).num_steps == 12  # the step that never ended is not one


def test_a_nan_loss_the_loop_skips_and_goes_on_from_is_still_reported(tmp_path: Path) -> None:
    """A loop that skips bad batches itself: the run ends finite, but a loss went NaN."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradoc.watch(model, opt, out=tmp_path / "run") as run:
        for step in range(30):
            x = torch.randn(8, 4)
            loss = model(x).pow(2).mean() * (math.inf if step == 7 else 1.0)
            if not torch.isfinite(loss):
                continue
            opt.zero_grad()
            loss.backward()
            opt.step()
    top = headline(json.loads((run.dir / "report.json").read_text()))
    assert (top["kind"], top["step"]) == ("nonfinite", 7)
    assert all(math.isfinite(v) for v in gradoc.open_run(run.dir).scalar("loss").values)


def test_a_finite_loss_checked_and_backpropagated_costs_no_finding(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradoc.watch(model, opt, out=tmp_path / "run") as run:
        for _ in range(12):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            assert torch.isfinite(loss) and not math.isnan(loss.item())
            opt.zero_grad()
            (loss / 1).backward()
            opt.step()
    log = gradoc.open_run(run.dir)
    assert [e.kind for e in log.events] == []
    assert json.loads((run.dir / "report.json").read_text())["status"] == "healthy"


# -- gradients before the program's clipping -------------------------------------------------
def test_the_logged_gradient_norms_are_those_before_the_programs_clip(tmp_path: Path) -> None:
    """lr 0.3 with clip_grad_norm_(..., 1.0): what the clip measured is what gradoc logs."""
    gradoc_run(tmp_path, "small_lm_clipped.py", "--lr", "0.3", "--steps", "40")
    log = gradoc.open_run(tmp_path / "run")
    norms, measured = log.scalar("grad_norm").values, log.scalar("clip_norm").values
    assert len(norms) == len(measured) == 40
    assert norms == pytest.approx(measured, rel=1e-5)
    assert max(norms) > 1.0  # after the clip every norm would be <= 1
    assert log.scalar("clip_max").values == [1.0] * 40
    clipping = log.meta["clipping"]
    assert {k: clipping[k] for k in ("fn", "threshold")} == {
        "fn": "clip_grad_norm_",
        "threshold": 1.0,
    }
    assert clipping["at"]["file"].endswith("small_lm_clipped.py")  # where a fix's edit goes
    assert "clip_grad_norm_(" in clipping["at"]["code"]
    assert log.meta["clip_calls"] == 40


def _clipped_run(
    tmp_path: Path, clip: Callable[[nn.Module], torch.Tensor | None], scaler: bool = False
) -> tuple[list[float], list[float], gradoc.RunLog]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    amp = torch.amp.GradScaler("cpu", init_scale=256.0, enabled=scaler)
    before: list[float] = []
    with gradoc.watch(model, opt, out=tmp_path / "run") as run:
        for _ in range(8):
            x = torch.randn(32, 6) * 10
            loss = F.mse_loss(model(x), x.sum(1, keepdim=True) * 5)
            opt.zero_grad()
            amp.scale(loss).backward()
            amp.unscale_(opt)
            grads = [p.grad for p in model.parameters()]
            before.append(float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))))
            clip(model)
            amp.step(opt)
            amp.update()
    log = gradoc.open_run(run.dir)
    return before, log.scalar("grad_norm").values, log


def test_pre_clip_norms_whatever_the_clip_is_imported_as(tmp_path: Path) -> None:
    from torch.nn.utils import clip_grad_norm_  # bound before gradoc's tap is installed

    before, logged, log = _clipped_run(tmp_path, lambda m: clip_grad_norm_(m.parameters(), 0.5))
    assert logged == pytest.approx(before, rel=1e-5) and max(before) > 0.5
    assert log.scalar("clip_norm").values == pytest.approx(before, rel=1e-5)


def test_value_clipping_is_recorded_with_the_largest_gradient(tmp_path: Path) -> None:
    _, logged, log = _clipped_run(
        tmp_path, lambda m: torch.nn.utils.clip_grad_value_(m.parameters(), 0.01)
    )
    clipping = log.meta["clipping"]
    assert {k: clipping[k] for k in ("fn", "threshold")} == {
        "fn": "clip_grad_value_",
        "threshold": 0.01,
    }
    assert "clip_grad_value_(" in clipping["at"]["code"]
    largest = log.scalar("clip_norm").values
    assert len(largest) == 8 and min(largest) > 0.01  # it bit on every step
    assert all(n > 0.01 for n in logged)


def test_with_a_grad_scaler_the_norms_are_unscaled_and_before_the_clip(tmp_path: Path) -> None:
    before, logged, log = _clipped_run(
        tmp_path, lambda m: torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5), scaler=True
    )
    assert logged == pytest.approx(before, rel=1e-5)
    assert log.meta["loss_read"]["unscaled"] == "GradScaler"
    plain = _clipped_run(tmp_path / "plain", lambda m: None)[2].scalar("loss").values
    assert log.scalar("loss").values[:1] == pytest.approx(plain[:1], rel=1e-6)


# -- the loss as real programs compute it ---------------------------------------------------
def test_a_loss_from_forward_divided_for_accumulation_is_read_as_the_program_optimises_it(
    tmp_path: Path,
) -> None:
    """forward() returns cross_entropy(ignore_index=-1), divided by 4 micro-batches, from an
    N(0, 1) initialisation: far above ln 40 at step 0."""
    _, report = gradoc_run(tmp_path, "forward_loss_accum.py", "--steps", "12")
    top = headline(report)
    assert (top["kind"], top["step"]) == ("poor_initialization", 0)
    assert "initialis" in top["root_cause"]
    log = gradoc.open_run(tmp_path / "run")
    assert log.scalar("n_backward").values == [4] * 12
    assert log.scalar("loss").values[0] > 100  # the micro-batches' mean, not a quarter of it
    assert log.meta["loss_division"] == {"undone": True, "by": 4.0}
    read = log.meta["loss_read"]
    assert read["returned"] == "by the model's forward()"
    kind = dict(read["kind"])
    at = kind.pop("at")  # where backward() was called, and on which variable: a fix's line
    assert at["loss"] == "loss" and at["code"].endswith(".backward()")
    assert at["file"].endswith("forward_loss_accum.py")
    assert kind == {
        "node": "NllLossBackward0",
        "fn": "cross_entropy",
        "classes": 40,
        "ignore_index": -1,
    }
    assert "read through" in report["run"]["loss_read"]


@pytest.mark.parametrize("extra", [("--scaler",), ("--smoothing", "0.1"), ("--init-std", "0.02")])
def test_the_loss_is_recognised_through_a_scaler_label_smoothing_and_a_good_init(
    tmp_path: Path, extra: tuple[str, ...]
) -> None:
    _, report = gradoc_run(tmp_path, "forward_loss_accum.py", "--steps", "6", *extra)
    log = gradoc.open_run(tmp_path / "run")
    kind = log.meta["loss_read"]["kind"]
    assert (kind["fn"], kind["classes"]) == ("cross_entropy", 40)
    kinds = [f["kind"] for f in report["findings"] if f["severity"] != "info"]
    if "--init-std" in extra:
        assert kinds == [] and log.scalar("loss").values[0] == pytest.approx(math.log(40), rel=0.05)
    else:
        assert kinds[0] == "poor_initialization"
    if "--smoothing" in extra:
        assert kind["label_smoothing"] is True
    if "--scaler" in extra:
        assert log.meta["loss_read"]["unscaled"] == "GradScaler"
        assert log.scalar("loss").values[0] < 1000  # not x1024


def test_losses_combine_as_the_program_optimises_them() -> None:
    assert losses.combine([1.0, 2.0, 3.0, 2.0], [4.0] * 4) == (8.0, True)  # loss / 4 each
    assert losses.combine([1.0, 3.0], [4.0, 4.0]) == (2.0, False)  # not divided by their number
    assert losses.combine([1.0, 3.0], None) == (2.0, None)  # summed accumulation: the mean
    x = torch.randn(8, 5, requires_grad=True)
    y = torch.randint(0, 5, (8,))
    micro = losses.read(F.cross_entropy(x, y) / 4, {})
    assert micro.divisor is not None and float(micro.divisor) == 4.0
    kind = losses.kind(micro.node)
    assert kind == {"node": "NllLossBackward0", "fn": "cross_entropy", "classes": 5}
    doubled = losses.read(F.cross_entropy(x, y) * 2, {})  # no chance level for 2 * ce
    assert doubled.divisor is None and losses.kind(doubled.node) == {"node": "MulBackward0"}


# -- padding where Hugging Face models take it ------------------------------------------------
hf = pytest.mark.skipif(
    __import__("importlib").util.find_spec("transformers") is None, reason="needs transformers"
)


@hf
def test_a_bert_classifier_trained_without_its_attention_mask_leaks(tmp_path: Path) -> None:
    _, report = gradoc_run(tmp_path, "hf_bert_no_mask.py", options=("--check", "padding"))
    top = headline(report)
    assert top["kind"] == "padding_leak"
    assert top["layer"] == "bert.encoder.layer.0.attention.self"
    # without the audit, the pads the embedding's padding_idx finds are named
    _, unaudited = gradoc_run(tmp_path / "b", "hf_bert_no_mask.py")
    waste = next(f for f in unaudited["findings"] if f["kind"] == "padding_waste")
    assert "no mask argument" in waste["summary"] and "--check padding" in waste["summary"]


@hf
def test_a_bert_classifier_given_its_mask_does_not_leak(tmp_path: Path) -> None:
    _, report = gradoc_run(tmp_path, "hf_bert_no_mask.py", "--mask", options=("--check", "padding"))
    assert "padding_leak" not in [f["kind"] for f in report["findings"]]


@hf
@pytest.mark.parametrize("ignore", [False, True])
def test_a_gpt2_whose_labels_keep_the_pads_counts_them_in_its_loss(
    tmp_path: Path, ignore: bool
) -> None:
    args = ("--ignore-pads",) if ignore else ()
    _, report = gradoc_run(tmp_path, "hf_gpt2_pad_labels.py", *args, options=("--check", "padding"))
    kinds = [f["kind"] for f in report["findings"] if f["severity"] != "info"]
    if ignore:
        assert kinds == []
        return
    top = headline(report)
    assert top["kind"] == "loss_includes_padding"
    assert any("-100" in fix["action"] for fix in top["fixes"])


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))


def test_reading_a_loss_warns_at_the_programs_own_line(tmp_path: Path) -> None:
    """PyTorch warns (once a process) about float() of a tensor that requires grad, at the
    caller's line: the tap that sees the read must not become that line, nor swallow it."""
    script = tmp_path / "reads.py"
    script.write_text(
        "import torch\n"
        "w = torch.ones(3, requires_grad=True)\n"
        "loss = (w * 2).sum()\n"
        "print(float(loss))\n"
    )
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    watched = subprocess.run(
        [sys.executable, "-m", "gradoc", "run", "--out", str(tmp_path / "run"), str(script)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert f"{script}:4: UserWarning" in plain.stderr
    assert f"{script}:4: UserWarning" in watched.stderr
    assert watched.stdout == plain.stdout == "6.0\n"


def test_the_taps_leave_torch_as_they_found_it(tmp_path: Path) -> None:
    inherited = {name: name in torch.Tensor.__dict__ for name in ("item", "isnan", "__float__")}
    originals = (torch.isfinite, torch.nn.utils.clip_grad_value_, torch.amp.GradScaler.step)
    model = nn.Linear(3, 1)
    opt = torch.optim.Adam(model.parameters())
    with gradoc.watch(model, opt, out=tmp_path / "run"):
        assert torch.isfinite is not originals[0]
        model(torch.randn(2, 3)).sum().backward()
        opt.step()
    assert {name: name in torch.Tensor.__dict__ for name in inherited} == inherited
    assert (torch.isfinite, torch.nn.utils.clip_grad_value_, torch.amp.GradScaler.step) == originals


def test_a_step_the_grad_scaler_skips_is_ended_and_counted(tmp_path: Path) -> None:
    """The scaler finds an inf gradient and never calls optimizer.step(): still a step."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=16.0)
    with gradoc.watch(model, opt, out=tmp_path / "run") as run:
        for step in range(6):
            opt.zero_grad()
            scaler.scale(model(torch.randn(8, 4)).pow(2).mean()).backward()
            if step == 3:
                model.bias.grad.fill_(math.inf)  # type: ignore[union-attr]
            scaler.step(opt)
            scaler.update()
    log = gradoc.open_run(run.dir)
    assert log.num_steps == 6 and log.scalar("n_backward").values == [1] * 6
    assert [(e.kind, e.step) for e in log.events if e.kind == "scaler_skipped"] == [
        ("scaler_skipped", 3)
    ]
    assert log.meta["scaler_skipped_steps"] == 1
    assert log.param("weight", "update_norm").steps == [0]  # params every 10: step 0 only


def test_a_nan_printed_just_before_the_end_is_found_or_said(tmp_path: Path) -> None:
    """A metric computed without gradients turned -inf and the loop stopped: gradoc saw no
    non-finite loss or gradient, but the program printed one and ended right after."""
    plain = python(tmp_path, "metric_nan_printed.py")
    done, report = gradoc_run(tmp_path, "metric_nan_printed.py")
    assert done.stdout == plain.stdout
    top = headline(report)
    assert (top["kind"], top["step"]) == ("nonfinite", 26)
    assert top["origin"]["op"] == "aten.log.default"  # the re-run found it
    assert top["origin"]["code"] == "metric = error.abs().log().mean()"
    _, unlocated = gradoc_run(
        tmp_path / "b", "metric_nan_printed.py", options=("--replay-budget", "0")
    )
    top = headline(unlocated)
    assert (top["kind"], top["severity"]) == ("nonfinite", "warning")
    assert "log-error -inf" in top["summary"] and "does not watch" in top["summary"]


def test_a_sentinel_inf_printed_long_before_the_end_is_no_finding(tmp_path: Path) -> None:
    _, report = gradoc_run(tmp_path, "metric_nan_printed.py", "--never")
    assert report["status"] == "healthy"
