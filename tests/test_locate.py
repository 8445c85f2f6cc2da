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

HERE = Path(__file__).resolve()


def line_of(marker: str) -> int:
    """The line of this file that carries ``# BUG: <marker>``."""
    for i, text in enumerate(HERE.read_text().splitlines(), start=1):
        if text.rstrip().endswith(f"# BUG: {marker}"):
            return i
    raise AssertionError(marker)


def run(
    tmp_path: Path,
    model: nn.Module | list[nn.Module],
    opt: torch.optim.Optimizer,
    step: Callable[[int], torch.Tensor],
    steps: int = 8,
) -> dict[str, Any]:
    """Train under gradoc.watch; return the origin the report gives its nonfinite story."""
    with gradoc.watch(model, opt, out=tmp_path / "run") as r:
        for s in range(steps):
            opt.zero_grad()
            step(s).backward()
            opt.step()
    report = json.loads((r.dir / "report.json").read_text())
    story = next(f for f in report["findings"] if f.get("origin"))
    assert story["kind"] == "nonfinite" or "nonfinite" in {x["kind"] for x in story["related"]}
    origin: dict[str, Any] = story["origin"]
    return origin


def check(
    origin: dict[str, Any], phase: str, op: str | None, module: str | None, marker: str | None
) -> None:
    assert origin["phase"] == phase, origin
    if op is not None:
        assert origin["op"] == op, origin
    assert origin["module"] == module, origin
    if marker is not None:
        assert origin["file"] == str(HERE) and origin["line"] == line_of(marker), origin


class PosEncoding(nn.Module):
    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(x.shape[1], dtype=x.dtype)[None, :]
        rel = pos / (lengths - 1).to(x.dtype)[:, None]  # BUG: length-1
        return x + rel[..., None]


class SeqModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pos_encoding = PosEncoding()
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.pos_encoding(x, lengths).mean(1))
        return out


def test_zero_over_zero_for_a_length_1_sequence(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = SeqModel()
    opt = torch.optim.Adam(model.parameters(), 1e-3)

    def step(s: int) -> torch.Tensor:
        lengths = torch.tensor([5, 3, 1 if s == 4 else 2, 4])
        return F.cross_entropy(model(torch.randn(4, 5, 8), lengths), torch.tensor([0, 1, 0, 1]))

    origin = run(tmp_path, model, opt, step)
    check(origin, "forward", "aten.div.Tensor", "pos_encoding", "length-1")
    assert origin["step"] == 4
    assert {"signal": "zeros in the denominator", "value": 1} in origin["evidence"]


class Normalise(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True)  # BUG: zero-std


def test_division_by_a_zero_standard_deviation(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(Normalise(), nn.Linear(6, 1))
    opt = torch.optim.SGD(model.parameters(), 0.01)

    def step(s: int) -> torch.Tensor:
        x = torch.randn(4, 6)
        if s == 3:
            x[1] = 2.0  # a constant row: std 0
        return model(x).pow(2).mean()

    check(run(tmp_path, model, opt, step), "forward", "aten.div.Tensor", "0", "zero-std")


class Softmax(nn.Module):
    def forward(self, z: torch.Tensor) -> torch.Tensor:
        e = torch.exp(z)  # BUG: exp-overflow
        return e / e.sum(-1, keepdim=True)


def test_exp_overflow_in_a_hand_written_softmax(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), Softmax())
    opt = torch.optim.SGD(model.parameters(), 0.01)

    def step(s: int) -> torch.Tensor:
        x = torch.randn(8, 4) * (300.0 if s == 2 else 1.0)
        return F.nll_loss(torch.log(model(x) + 1e-9), torch.zeros(8, dtype=torch.long))

    origin = run(tmp_path, model, opt, step)
    check(origin, "forward", "aten.exp.default", "1", "exp-overflow")
    assert any(e["signal"] == "exp argument max" and e["value"] > 88 for e in origin["evidence"])


class Radius(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(3, 3, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        return torch.sqrt((h**2).sum(-1))  # BUG: sqrt-at-0


def test_sqrt_at_zero_whose_backward_is_infinite(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Radius()
    opt = torch.optim.SGD(model.parameters(), 0.01)

    def step(s: int) -> torch.Tensor:
        x = torch.randn(4, 3)
        if s == 5:
            x[0] = 0.0  # radius 0: forward fine, backward 1/(2*sqrt(0)) = inf
        return model(x).mean()

    origin = run(tmp_path, model, opt, step)
    check(origin, "backward", "SqrtBackward0", "", "sqrt-at-0")
    assert origin["step"] == 5


class Penalty(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        barrier = torch.where(h > -3, 0.0, float("inf"))  # an intended inf
        weight = (h.detach() > 100).float()  # 0 for ordinary values
        return h + weight * barrier  # BUG: zero-times-inf


def test_zero_times_inf(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Penalty()
    opt = torch.optim.SGD(model.parameters(), 0.01)

    def step(s: int) -> torch.Tensor:
        return model(torch.randn(8, 4) * (5.0 if s == 3 else 0.1)).pow(2).mean()

    origin = run(tmp_path, model, opt, step)
    check(origin, "forward", "aten.mul.Tensor", "", "zero-times-inf")
    assert any(e["signal"] == "0 * inf positions" and e["value"] > 0 for e in origin["evidence"])


class Root(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x).pow(1.5)  # BUG: negative-pow


def test_pow_of_a_negative_base_with_a_fractional_exponent(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Root()
    opt = torch.optim.SGD(model.parameters(), 0.01)
    origin = run(tmp_path, model, opt, lambda s: model(torch.randn(8, 4)).mean())
    check(origin, "forward", "aten.pow.Tensor_Scalar", "", "negative-pow")
    assert any(e["signal"] == "negative bases" and e["value"] > 0 for e in origin["evidence"])


def test_nan_in_the_input_batch(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), 0.01)

    def step(s: int) -> torch.Tensor:
        x = torch.randn(16, 5)
        if s == 2:
            x[[1, 4, 9], 3] = math.nan
        return model(x).pow(2).mean()

    origin = run(tmp_path, model, opt, step)
    assert origin["phase"] == "input" and origin["step"] == 2
    ev = {e["signal"]: e for e in origin["evidence"]}
    assert ev["non-finite values in the input batch"]["value"] == 3
    assert ev["feature with the most"]["value"] == 3 and ev["samples affected"]["value"] == 3


def test_huge_learning_rate_points_at_the_update(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=3e38)  # lr * grad overflows float32
    origin = run(tmp_path, model, opt, lambda s: 100 * model(torch.randn(8, 4)).pow(2).mean())
    assert origin["phase"] == "optimizer" and origin["op"] == "optimizer.step"
    assert origin["step"] == 0  # the update of step 0 wrote the non-finite weights
    assert "consequence" in origin["note"]


class Half(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.float16):
            y = self.fc(x)  # BUG: fp16-overflow
        return y.float()


def test_fp16_overflow_under_autocast(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Half()
    nn.init.constant_(model.fc.weight, 1.0)
    opt = torch.optim.SGD(model.parameters(), 1e-6)

    def step(s: int) -> torch.Tensor:
        return model(torch.full((2, 64), 2000.0 if s == 1 else 1.0)).mean()  # 64 * 2000 > 65504

    origin = run(tmp_path, model, opt, step)
    check(origin, "forward", None, "fc", "fp16-overflow")
    assert {"signal": "dtype", "value": "float16"} in origin["evidence"]


def test_log_of_zero_in_a_loss_outside_the_model(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    opt = torch.optim.SGD(model.parameters(), 0.01)

    def step(s: int) -> torch.Tensor:
        p = model(torch.randn(8, 4))
        return -torch.log(p).mean()  # BUG: log-0-in-loss

    origin = run(tmp_path, model, opt, step)
    check(origin, "forward", "aten.log.default", None, "log-0-in-loss")
    assert "tracing armed" in origin["note"] and origin["step"] == 1  # its next occurrence


def test_a_model_of_raw_tensors(tmp_path: Path) -> None:
    torch.manual_seed(0)
    w = torch.randn(4, 1, requires_grad=True)
    opt = torch.optim.SGD([w], 0.01)

    def step(s: int) -> torch.Tensor:
        x = torch.randn(8, 4)
        scale = (x @ w).abs().clamp(max=1.0) * (s % 2)  # zero on even steps
        return (x @ w / scale).mean()  # BUG: raw-division

    origin = run(tmp_path, [], opt, step)
    check(origin, "forward", "aten.div.Tensor", None, "raw-division")


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


def test_corrupted_updates_are_not_applied_unless_asked(tmp_path: Path) -> None:
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

    assert torch.isfinite(train()).all()
    assert not torch.isfinite(train(skip_nonfinite_updates=False)).all()
    log = gradoc.open_run(tmp_path / "{}")
    assert log.meta["skipped_updates"] == 1 and "skipped_update" in [e.kind for e in log.events]


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
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(EXITS_AT_FIRST_NAN)
    done = subprocess.run(
        [sys.executable, "-m", "gradoc", "run", "--out", str(tmp_path / "run"), str(script)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and "stopping" in done.stdout
    (finding,) = [
        f
        for f in json.loads((tmp_path / "run/report.json").read_text())["findings"]
        if f.get("origin")
    ]
    origin = finding["origin"]
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
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(LOSS_NAN_THEN_EXIT)
    done = subprocess.run(
        [sys.executable, "-m", "gradoc", "run", "--out", str(tmp_path / "run"), str(script)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 1 and "non-finite loss at step 6" in done.stderr
    assert "re-running train.py up to step 6" in done.stderr
    (finding,) = [
        f
        for f in json.loads((tmp_path / "run/report.json").read_text())["findings"]
        if f.get("origin")
    ]
    origin = finding["origin"]
    assert (origin["phase"], origin["op"], origin["module"]) == (
        "forward",
        "aten.log.default",
        None,
    )
    assert origin["file"] == str(script) and origin["line"] == 11 and origin["step"] == 6
    assert "re-ran it with every RNG seeded" in origin["note"]
