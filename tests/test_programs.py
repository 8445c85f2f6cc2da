"""Programs that train without an optimizer step gradoc could count, or in ways it could
not see into: hand-written updates, ``torch.autograd.grad`` loops, LBFGS closures,
compiled models, attention modules, programs that never train. Each is a small script in
tests/programs/ run unchanged under ``gradoc run``; each NaN/Inf must be located to its
exact op and line."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn

import gradoc
from gradoc.locate.numerics import NumericsError
from gradoc.runtime.replay import unlocated_step
from gradoc.store import RunMeta

PROGRAMS = Path(__file__).parent / "programs"


def line_of(script: str, text: str) -> int:
    lines = (PROGRAMS / script).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def gradoc_run(
    out: Path, script: str, *flags: str, code: int = 0
) -> tuple[dict[str, Any], subprocess.CompletedProcess[str]]:
    done = subprocess.run(
        [sys.executable, "-m", "gradoc", "run", "--out", str(out), *flags, str(PROGRAMS / script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=out.parent,
    )
    assert done.returncode == code, done.stderr
    return json.loads((out / "report.json").read_text()), done


def origin_of(report: dict[str, Any]) -> dict[str, Any]:
    top = next(f for f in report["findings"] if f["severity"] in ("error", "warning"))
    assert top["kind"] == "nonfinite", top["summary"]
    assert top.get("origin"), top["summary"]
    origin: dict[str, Any] = top["origin"]
    return origin


# script, the text on the origin's line, op, phase, module, how steps are counted, exit code
LOCATED = [
    # read from the loss's graph at backward(), through the product that saved one operand
    ("logreg_by_hand.py", "torch.log(p)", "log", "forward", None, "backward()", 0),
    (
        "input_by_autograd_grad.py",
        "torch.sqrt(spread)",
        "aten.sqrt.default",
        "forward",
        None,
        "torch.autograd.grad()",
        1,
    ),
    ("mlp_by_hand_inf_grad.py", "torch.sqrt(", "SqrtBackward0", "backward", None, "backward()", 0),
    (
        "compiled_nan_forward.py",
        "torch.log(h)",
        "aten.log.default",
        "forward",
        "head",
        "optimizer.step()",
        0,
    ),
    (
        "attention_masked_row.py",
        "F.softmax(att",
        "aten._softmax.default",
        "forward",
        "blocks.0.attn",
        "optimizer.step()",
        0,
    ),
]


@pytest.mark.parametrize(
    "script,text,op,phase,module,counted,code", LOCATED, ids=[c[0] for c in LOCATED]
)
def test_the_nan_is_located_to_its_op_and_line(
    tmp_path: Path,
    script: str,
    text: str,
    op: str,
    phase: str,
    module: str | None,
    counted: str,
    code: int,
) -> None:
    report, _ = gradoc_run(tmp_path / "run", script, code=code)
    origin = origin_of(report)
    assert (origin["op"], origin["phase"], origin["module"]) == (op, phase, module)
    assert origin["file"] == str(PROGRAMS / script)
    assert origin["line"] == line_of(script, text)
    assert report["run"]["steps_counted_by"] == [counted]
    assert report["run"]["steps"] >= 1


def test_an_origin_is_read_through_a_product_that_saved_one_operand(tmp_path: Path) -> None:
    """``(1 - y) * torch.log(1 - p)`` saves ``1 - y`` alone (the other gradient needs only it):
    with no re-run allowed, the graph still finds the log, since a product of a non-finite
    input is non-finite (issue 46, item 6)."""
    report, _ = gradoc_run(tmp_path / "run", "logreg_by_hand.py", "--replay-budget", "0")
    origin = origin_of(report)
    assert (origin["op"], origin["phase"]) == ("log", "forward"), origin
    assert origin["line"] == line_of("logreg_by_hand.py", "torch.log(p)")
    assert "without a replay" in origin["note"], origin["note"]


def test_hand_written_steps_are_named_after_the_variables(tmp_path: Path) -> None:
    gradoc_run(tmp_path / "run", "mlp_by_hand_inf_grad.py")
    log = gradoc.open_run(tmp_path / "run")
    assert sorted(p.name for p in log.params) == ["W1", "W2"]
    assert len(log.scalar("loss").steps) == 8


def test_a_compiled_model_is_named_as_written(tmp_path: Path) -> None:
    gradoc_run(tmp_path / "run", "compiled_nan_forward.py")
    log = gradoc.open_run(tmp_path / "run")
    names = sorted(p.name for p in log.params)
    assert names == ["body.bias", "body.weight", "head.fc.bias", "head.fc.weight"]


def test_an_lbfgs_closure_is_located_the_same_way_every_time(tmp_path: Path) -> None:
    """The closure computes the loss: its division by zero is read from the loss's graph at
    the backward inside the closure (the linear layer's output is known finite from its
    finite operands), at the step the closure ran; five runs agree."""

    def one(i: int) -> dict[str, Any]:
        (tmp_path / str(i)).mkdir()
        return origin_of(gradoc_run(tmp_path / str(i) / "run", "lbfgs_mape.py")[0])

    with ThreadPoolExecutor(2) as pool:
        origins = list(pool.map(one, range(5)))
    first = origins[0]
    assert (first["op"], first["phase"]) == ("div", "forward")
    assert "without a replay" in first["note"], first["note"]
    assert first["line"] == line_of("lbfgs_mape.py", "/ target")
    assert first["step"] == 0  # read after the closure ran, not before
    assert all((o["op"], o["line"], o["step"]) == (first["op"], first["line"], 0) for o in origins)
    log = gradoc.open_run(tmp_path / "0" / "run")
    names = sorted(p.name for p in log.params)
    assert names == ["0.bias", "0.weight", "2.bias", "2.weight"]  # not group0.param0, ...


def test_a_gradient_penalty_is_not_a_step(tmp_path: Path) -> None:
    """WGAN-GP: autograd.grad through the critic before the first optimizer step. The
    optimizers hold the critic's weights, so they count the steps."""
    report, _ = gradoc_run(tmp_path / "run", "gan_gradient_penalty.py")
    assert report["run"]["steps_counted_by"] == ["optimizer.step()"]
    assert report["status"] == "healthy" and report["run"]["steps"] == 6
    log = gradoc.open_run(tmp_path / "run")
    assert log.scalar("loss").steps == [0, 1, 2, 3, 4, 5]


def test_check_numerics_finds_a_nan_in_a_program_that_never_trains(tmp_path: Path) -> None:
    report, done = gradoc_run(tmp_path / "run", "no_training_nan.py", "--check", "numerics")
    origin = origin_of(report)
    assert origin["op"] == "aten.log.default"
    assert origin["line"] == line_of("no_training_nan.py", "torch.log(positions)")
    assert "re-running" not in done.stderr  # found in the run itself


def test_a_program_without_steps_that_prints_a_nan_is_rerun_checked(tmp_path: Path) -> None:
    report, done = gradoc_run(tmp_path / "run", "no_training_nan.py")
    assert "with every operation checked" in done.stderr
    origin = origin_of(report)
    assert origin["line"] == line_of("no_training_nan.py", "torch.log(positions)")
    assert "every operation checked" in origin["note"]
    assert report["status"] == "problems"


def test_a_healthy_hand_written_loop_is_watched_and_unchanged(tmp_path: Path) -> None:
    script = str(PROGRAMS / "healthy_by_hand.py")
    plain = subprocess.run(
        [sys.executable, script], capture_output=True, text=True, timeout=120, check=True
    )
    report, done = gradoc_run(tmp_path / "run", "healthy_by_hand.py")
    assert done.stdout == plain.stdout  # the losses, bit for bit (printed with repr)
    assert report["status"] == "healthy"
    assert not [f for f in report["findings"] if f["severity"] in ("warning", "error")]
    log = gradoc.open_run(tmp_path / "run")
    assert len(log.scalar("grad_norm").steps) == 60
    updates = log.param("w", "update_norm")
    assert updates.values and all(v > 0 for v in updates.values)  # the update by hand
    assert "backward() calls, no optimizer" in done.stderr


# -- in-process: gradoc.check_numerics and module attribution ----------------------------
class Cell(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return torch.rsqrt(self.lin(x).abs() * 0 + h)  # an op with no submodule of its own


class Loop(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cell = Cell()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.ones(2, 4)
        for _ in range(3):  # the cell called in a Python loop
            h = self.cell(x, h) - 1.0  # h becomes 0 at t=1: rsqrt(0) = inf
        return h


def test_check_numerics_raises_at_the_op_with_the_innermost_module() -> None:
    model = Loop()
    with pytest.raises(NumericsError) as caught, gradoc.check_numerics():
        model(torch.randn(2, 4))
    origin = caught.value.origin
    assert origin.op == "aten.rsqrt.default" and origin.phase == "forward"
    assert origin.module == "cell"
    assert origin.code is not None and "torch.rsqrt" in origin.code
    assert isinstance(caught.value, FloatingPointError)


def test_check_numerics_records_a_backward_birth_with_its_forward_line() -> None:
    x = torch.zeros(3, requires_grad=True)
    with gradoc.check_numerics(raise_error=False) as check:
        y = torch.sqrt(x).sum()  # finite forward
        y.backward()  # 1 / (2 sqrt(0)) = inf
    assert check.origin is not None
    assert (check.origin.op, check.origin.phase) == ("SqrtBackward0", "backward")
    assert check.origin.code == "y = torch.sqrt(x).sum()  # finite forward"
    assert x.grad is not None and torch.isinf(x.grad).all()  # the program ran on unchanged


def test_uninitialised_memory_is_never_a_birth() -> None:
    with gradoc.check_numerics(raise_error=False) as check:
        buf = torch.empty(1000)
        buf.fill_(1.0)
        torch.empty_like(buf).zero_()
    assert check.origin is None


class Checkpointed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        self.head = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.utils.checkpoint.checkpoint(self.block, x, use_reentrant=True))


def test_steps_without_an_optimizer_in_process(tmp_path: Path) -> None:
    """gradoc.watch(model) with no optimizer: a step is one backward(); p.data updates by
    hand are the updates; a reentrant checkpoint's inner backward is not a step."""
    torch.manual_seed(0)
    model = Checkpointed()
    x, y = torch.randn(16, 4).requires_grad_(), torch.randn(16, 1)
    with gradoc.watch(model, out=tmp_path / "run", params=gradoc.every(1)) as run:
        for _ in range(5):
            loss = ((model(x) - y) ** 2).mean()
            model.zero_grad()
            loss.backward()
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-0.1)
    log = gradoc.open_run(run.dir)
    assert log.scalar("loss").steps == [0, 1, 2, 3, 4]
    names = sorted(p.name for p in log.params)
    assert names == ["block.0.bias", "block.0.weight", "head.bias", "head.weight", "x"]
    updates = [v for v in log.param("block.0.weight", "update_norm").values if v]
    assert len(updates) == 5
    assert log.meta["steps_counted_by"] == ["backward()"]


def test_a_program_that_printed_a_nan_without_steps_is_replayed_from_the_start() -> None:
    meta = RunMeta.of({"steps": 0, "printed_nonfinite": ["encoding [nan, 0.84]"]})
    assert unlocated_step([], meta, 0, []) == 0
    assert unlocated_step([], RunMeta.of({"steps": 0, "printed_nonfinite": []}), 0, []) is None


def test_an_overflow_under_a_matmul_that_saved_one_operand_is_born_at_the_exp(
    tmp_path: Path,
) -> None:
    """``exp(xb @ W + b)`` overflows thousands of steps in, on one row stored in other units:
    the matmul saved only ``xb`` (W's gradient needs it), so its output is known finite only
    from its finite operands. With no re-run allowed (a re-run's budget would end before that
    step), the graph still names the exp, not a division or the log after it."""
    report, _ = gradoc_run(tmp_path / "run", "softmax_regression_late.py", "--replay-budget", "0")
    origin = origin_of(report)
    assert (origin["op"], origin["phase"], origin["step"]) == ("exp", "forward", 11875), origin
    assert origin["line"] == line_of("softmax_regression_late.py", "torch.exp(")
    assert "without a replay" in origin["note"], origin["note"]


def test_a_float16_product_of_finite_operands_is_not_known_finite() -> None:
    """65,504 is float16's largest value: a product of finite float16 operands may overflow,
    so the walk does not pass a birth below it."""
    from gradoc.locate.graph import _Graph

    x = torch.full((2, 2), 300.0, dtype=torch.float16)
    w = torch.full((2, 2), 300.0, dtype=torch.float16, requires_grad=True)
    wide = torch.full((2, 2), 300.0, requires_grad=True)
    half, single = (x @ w).exp(), (x.float() @ wide).exp()
    for out, known in ((half, None), (single, True)):
        graph = _Graph()
        graph.read(out.grad_fn)
        (mm,) = [fn for fn, _ in out.grad_fn.next_functions]
        assert graph.resolve(mm) is known


def test_a_nan_born_in_an_unread_backward_is_located_by_the_re_run(tmp_path: Path) -> None:
    """``--grads-every 5``: step 33's gradients are not read at their step. The next step's
    loss, made on the weights its update wrote, is NaN; the held gradients of step 33 are
    read then and were non-finite, so step 33's backward is re-run (not the update that
    carried it), and the re-run names the op and line."""
    report, done = gradoc_run(tmp_path / "run", "backward_nan_unread.py", "--grads-every", "5")
    origin = origin_of(report)
    assert (origin["step"], origin["phase"], origin["op"]) == (33, "backward", "SqrtBackward0")
    assert origin["line"] == line_of("backward_nan_unread.py", "torch.sqrt(spread)")
    assert "re-running" in done.stderr and "up to step 33" in done.stderr
    with gradoc.open_run(tmp_path / "run") as log:
        assert log.meta.config["grads"] == "every(n=5)"
        assert log.scalar("grad_norm").steps[:3] == [0, 5, 10]
