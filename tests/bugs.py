"""A catalogue of NaN/Inf bugs people write, each a tiny training setup with the place
it should be located at. Used by tests/test_locate.py and benchmarks/locate_vs_anomaly.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = Path(__file__).resolve()
Step = Callable[[int], torch.Tensor]


def line_of(marker: str) -> int:
    """The line of this file that carries ``# BUG: <marker>``."""
    for i, text in enumerate(HERE.read_text().splitlines(), start=1):
        if text.rstrip().endswith(f"# BUG: {marker}"):
            return i
    raise KeyError(marker)


@dataclass(frozen=True)
class Bug:
    title: str
    make: Callable[[], tuple[nn.Module | list[nn.Module], torch.optim.Optimizer, Step]]
    phase: str
    op: str | None
    module: str | None
    marker: str | None
    """The ``# BUG:`` marker of the line the origin must point at (None: no line)."""
    step: int | None = None
    skip: bool = False
    """Located only when the bad update is skipped (``skip_nonfinite_updates=True``): a
    value born outside any module is caught by the armed trace at its next occurrence,
    which an applied NaN update (gradoc's default: it only observes) poisons first."""


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


def length_1() -> tuple[nn.Module, torch.optim.Optimizer, Step]:
    model = SeqModel()
    opt = torch.optim.Adam(model.parameters(), 1e-3)

    def step(s: int) -> torch.Tensor:
        lengths = torch.tensor([5, 3, 1 if s == 4 else 2, 4])
        return F.cross_entropy(model(torch.randn(4, 5, 8), lengths), torch.tensor([0, 1, 0, 1]))

    return model, opt, step


class Normalise(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True)  # BUG: zero-std


def zero_std() -> tuple[nn.Module, torch.optim.Optimizer, Step]:
    model = nn.Sequential(Normalise(), nn.Linear(6, 1))
    opt = torch.optim.SGD(model.parameters(), 0.01)

    def step(s: int) -> torch.Tensor:
        x = torch.randn(4, 6)
        if s == 3:
            x[1] = 2.0  # a constant row: std 0
        return model(x).pow(2).mean()

    return model, opt, step


class Softmax(nn.Module):
    def forward(self, z: torch.Tensor) -> torch.Tensor:
        e = torch.exp(z)  # BUG: exp-overflow
        return e / e.sum(-1, keepdim=True)


def exp_overflow() -> tuple[nn.Module, torch.optim.Optimizer, Step]:
    model = nn.Sequential(nn.Linear(4, 3), Softmax())
    opt = torch.optim.SGD(model.parameters(), 0.01)

    def step(s: int) -> torch.Tensor:
        x = torch.randn(8, 4) * (300.0 if s == 2 else 1.0)
        return F.nll_loss(torch.log(model(x) + 1e-9), torch.zeros(8, dtype=torch.long))

    return model, opt, step


class Radius(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(3, 3, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        return torch.sqrt((h**2).sum(-1))  # BUG: sqrt-at-0


def sqrt_at_0() -> tuple[nn.Module, torch.optim.Optimizer, Step]:
    model = Radius()
    opt = torch.optim.SGD(model.parameters(), 0.01)

    def step(s: int) -> torch.Tensor:
        x = torch.randn(4, 3)
        if s == 5:
            x[0] = 0.0  # radius 0: forward fine, backward 1/(2*sqrt(0)) = inf
        return model(x).mean()

    return model, opt, step


class Penalty(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        barrier = torch.where(h > -3, 0.0, float("inf"))  # an intended inf
        weight = (h.detach() > 100).float()  # 0 for ordinary values
        return h + weight * barrier  # BUG: zero-times-inf


def zero_times_inf() -> tuple[nn.Module, torch.optim.Optimizer, Step]:
    model = Penalty()
    opt = torch.optim.SGD(model.parameters(), 0.01)
    return model, opt, lambda s: model(torch.randn(8, 4) * (5.0 if s == 3 else 0.1)).pow(2).mean()


class Root(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x).pow(1.5)  # BUG: negative-pow


def negative_pow() -> tuple[nn.Module, torch.optim.Optimizer, Step]:
    model = Root()
    return (
        model,
        torch.optim.SGD(model.parameters(), 0.01),
        lambda s: model(torch.randn(8, 4)).mean(),
    )


def nan_input() -> tuple[nn.Module, torch.optim.Optimizer, Step]:
    model = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), 0.01)

    def step(s: int) -> torch.Tensor:
        x = torch.randn(16, 5)
        if s == 2:
            x[[1, 4, 9], 3] = math.nan  # BUG: nan-input
        return model(x).pow(2).mean()

    return model, opt, step


def huge_lr() -> tuple[nn.Module, torch.optim.Optimizer, Step]:
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=3e38)  # BUG: huge-lr
    return model, opt, lambda s: 100 * model(torch.randn(8, 4)).pow(2).mean()


def huge_finite_update() -> tuple[nn.Module, torch.optim.Optimizer, Step]:
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e20)  # BUG: huge-finite-update
    # weights ~1e20 after step 0 are finite; the loss of step 1 overflows on them
    return model, opt, lambda s: 100 * model(torch.randn(8, 4)).pow(2).mean()


class Half(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 8)
        nn.init.constant_(self.fc.weight, 1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.float16):
            y = self.fc(x)  # BUG: fp16-overflow
        return y.float()


def fp16_overflow() -> tuple[nn.Module, torch.optim.Optimizer, Step]:
    model = Half()
    opt = torch.optim.SGD(model.parameters(), 1e-6)
    # 64 inputs of 2000 sum past fp16's 65504 at step 1
    return model, opt, lambda s: model(torch.full((2, 64), 2000.0 if s == 1 else 1.0)).mean()


def log0_in_loss() -> tuple[nn.Module, torch.optim.Optimizer, Step]:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    opt = torch.optim.SGD(model.parameters(), 0.01)

    def step(s: int) -> torch.Tensor:
        p = model(torch.randn(8, 4))
        return -torch.log(p).mean()  # BUG: log-0-in-loss

    return model, opt, step


def raw_tensors() -> tuple[list[nn.Module], torch.optim.Optimizer, Step]:
    w = torch.randn(4, 1, requires_grad=True)
    opt = torch.optim.SGD([w], 0.01)

    def step(s: int) -> torch.Tensor:
        x = torch.randn(8, 4)
        scale = (x @ w).abs().clamp(max=1.0) * (s % 2)  # zero on even steps
        return (x @ w / scale).mean()  # BUG: raw-division

    return [], opt, step


BUGS: dict[str, Bug] = {
    "length-1 sequence: 0/0": Bug(
        "0/0 from a length-1 sequence",
        length_1,
        "forward",
        "aten.div.Tensor",
        "pos_encoding",
        "length-1",
        4,
    ),
    "zero std": Bug(
        "division by a zero std in a hand-written norm",
        zero_std,
        "forward",
        "aten.div.Tensor",
        "0",
        "zero-std",
        3,
    ),
    "exp overflow": Bug(
        "exp overflow in a hand-written softmax",
        exp_overflow,
        "forward",
        "aten.exp.default",
        "1",
        "exp-overflow",
        2,
    ),
    "sqrt at 0": Bug(
        "sqrt at 0 whose backward is infinite",
        sqrt_at_0,
        "backward",
        "SqrtBackward0",
        "",
        "sqrt-at-0",
        5,
    ),
    "0 * inf": Bug(
        "0 * inf", zero_times_inf, "forward", "aten.mul.Tensor", "", "zero-times-inf", 3
    ),
    "negative pow": Bug(
        "pow of a negative base, fractional exponent",
        negative_pow,
        "forward",
        "aten.pow.Tensor_Scalar",
        "",
        "negative-pow",
        0,
    ),
    "nan input": Bug("NaN in the input batch", nan_input, "input", None, None, None, 2),
    "huge lr": Bug(
        "huge learning rate making weights non-finite",
        huge_lr,
        "optimizer",
        "optimizer.step",
        None,
        None,
        0,
    ),
    "huge finite update": Bug(
        "an update that makes weights huge but finite",
        huge_finite_update,
        "optimizer",
        "optimizer.step",
        None,
        None,
        0,
    ),
    "fp16 overflow": Bug(
        "fp16 overflow under autocast", fp16_overflow, "forward", None, "fc", "fp16-overflow", 1
    ),
    "log(0) in the loss": Bug(
        "log(0) in a hand-written loss outside the model",
        log0_in_loss,
        "forward",
        "aten.log.default",
        None,
        "log-0-in-loss",
        1,
    ),
    "raw tensors": Bug(
        "a model of raw tensors with no modules",
        raw_tensors,
        "forward",
        "aten.div.Tensor",
        None,
        "raw-division",
        None,
        skip=True,
    ),
}
