"""Labelled training scenarios: small real runs, each a known pathology or a healthy control.

Each function trains for a few seconds on the CPU under gradoc.watch and returns the
run directory. ``EXPECTED`` says what a correct diagnosis finds in each.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

import gradoc

Scenario = Callable[[Path], Path]


def _mlp(
    widths: list[int], act: type[nn.Module], std: float | None = None, bias: float | None = None
) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(widths)):
        lin = nn.Linear(a, b)
        if std is not None:
            nn.init.normal_(lin.weight, 0.0, std)
        if bias is not None:
            nn.init.constant_(lin.bias, bias)
        layers.append(lin)
        if i < len(widths) - 2:
            layers.append(act())
    return nn.Sequential(*layers)


def _regression_data(
    step: int, dim: int = 16, batch: int = 64
) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step)
    x = torch.randn(batch, dim, generator=g)
    return x, (x[:, :4].sum(1, keepdim=True)).sin()


def _classify_data(
    step: int, dim: int = 16, batch: int = 64, classes: int = 4
) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step)
    x = torch.randn(batch, dim, generator=g)
    return x, (x[:, :classes].argmax(1))


def _train(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    out: Path,
    steps: int,
    loss_fn: Callable[[int], torch.Tensor],
    **watch: object,
) -> Path:
    with gradoc.watch(model, opt, out=out, **watch) as run:  # type: ignore[arg-type]
        for step in range(steps):
            opt.zero_grad()
            loss = loss_fn(step)
            loss.backward()
            opt.step()
            if not math.isfinite(loss.item()) and step > 3:
                break
    return run.dir


def _classify(model: nn.Module, opt: torch.optim.Optimizer, out: Path, steps: int) -> Path:
    """Train on the 4-class task of _classify_data with cross-entropy."""

    def loss(s: int) -> torch.Tensor:
        x, y = _classify_data(s)
        return F.cross_entropy(model(x), y)

    return _train(model, opt, out, steps, loss)


# -- pathologies ---------------------------------------------------------------------------
def exploding_init(out: Path) -> Path:
    """A 10-layer ReLU MLP initialised from N(0, 1): gradients are huge from step 0."""
    torch.manual_seed(0)
    model = _mlp([16] + [64] * 9 + [1], nn.ReLU, std=1.0)
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    return _train(
        model,
        opt,
        out,
        60,
        lambda s: F.mse_loss(model(_regression_data(s)[0]), _regression_data(s)[1]),
    )


def vanishing_sigmoid(out: Path) -> Path:
    """A 12-layer sigmoid MLP with default init: the first layers get almost no gradient."""
    torch.manual_seed(0)
    model = _mlp([16] + [32] * 11 + [4], nn.Sigmoid)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return _classify(model, opt, out, 150)


def dead_relu(out: Path) -> Path:
    """A ReLU MLP whose hidden biases start at -4: most units never fire."""
    torch.manual_seed(0)
    model = _mlp([16, 128, 128, 4], nn.ReLU, bias=-4.0)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    return _classify(model, opt, out, 120)


def saturated_tanh(out: Path) -> Path:
    """A tanh MLP initialised with std 1 on wide layers: most pre-activations are far past 3."""
    torch.manual_seed(0)
    model = _mlp([16, 256, 256, 256, 4], nn.Tanh, std=1.0)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    return _classify(model, opt, out, 120)


def loss_spike(out: Path) -> Path:
    """A healthy MLP that meets one corrupted batch (inputs scaled by 1000) at step 150."""
    torch.manual_seed(0)
    model = _mlp([16, 64, 64, 4], nn.ReLU)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def loss(s: int) -> torch.Tensor:
        x, y = _classify_data(s)
        if s == 150:
            x = x * 1000.0
        return F.cross_entropy(model(x), y)

    return _train(model, opt, out, 260, loss)


def divergence_lr(out: Path) -> Path:
    """SGD with a learning rate 100x too high on a regression MLP: the loss climbs."""
    torch.manual_seed(0)
    model = _mlp([16, 64, 64, 1], nn.Tanh)
    opt = torch.optim.SGD(model.parameters(), lr=0.35)
    return _train(
        model,
        opt,
        out,
        150,
        lambda s: F.mse_loss(model(_regression_data(s)[0]) * 3, _regression_data(s)[1] * 3),
    )


def plateau_random_labels(out: Path) -> Path:
    """Labels independent of the inputs: the loss stays at ln(4) however long it trains."""
    torch.manual_seed(0)
    model = _mlp([16, 64, 4], nn.ReLU)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def loss(s: int) -> torch.Tensor:
        x, _ = _classify_data(s)
        y = torch.randint(0, 4, (x.shape[0],), generator=torch.Generator().manual_seed(10_000 + s))
        return F.cross_entropy(model(x), y)

    return _train(model, opt, out, 400, loss)


def poor_init_small(out: Path) -> Path:
    """An 8-layer tanh MLP initialised with std 0.01 and zero biases: activations shrink
    ~12x a layer (gain 0.01 * sqrt(64))."""
    torch.manual_seed(0)
    model = _mlp([16] + [64] * 7 + [4], nn.Tanh, std=0.01, bias=0.0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    return _classify(model, opt, out, 40)


def large_updates(out: Path) -> Path:
    """SGD at learning rate 50: each update is many times the weights it changes."""
    torch.manual_seed(0)
    model = _mlp([16, 32, 4], nn.ReLU)
    opt = torch.optim.SGD(model.parameters(), lr=50.0)
    return _classify(model, opt, out, 40)


def tiny_updates(out: Path) -> Path:
    """A learning rate of 1e-11: the weights never move."""
    torch.manual_seed(0)
    model = _mlp([16, 64, 4], nn.ReLU)
    opt = torch.optim.SGD(model.parameters(), lr=1e-11)
    return _classify(model, opt, out, 60)


class _LogOfZero(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 4)
        self.scale = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # log of a ReLU output: log(0) = -inf as soon as one scale goes to zero
        return self.fc(x) * torch.log(torch.relu(self.scale(x)))


def nonfinite_log(out: Path) -> Path:
    """log(relu(.)) turns -inf for an input whose scale is negative: NaN loss at step 0."""
    torch.manual_seed(0)
    model = _LogOfZero()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    return _classify(model, opt, out, 10)


# -- healthy controls ------------------------------------------------------------------------
def healthy_transformer(out: Path) -> Path:
    torch.manual_seed(0)

    class Tiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(50, 32)
            layer = nn.TransformerEncoderLayer(32, 4, 64, 0.1, batch_first=True, norm_first=True)
            self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = nn.Linear(32, 2)

        def forward(self, t: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.head(self.encoder(self.embed(t)).mean(1))
            return out

    model = Tiny()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def loss(s: int) -> torch.Tensor:
        t = torch.randint(0, 50, (16, 12), generator=torch.Generator().manual_seed(s))
        return F.cross_entropy(model(t), (t[:, 0] < 25).long())

    return _train(model, opt, out, 150, loss)


def healthy_cnn_batchnorm(out: Path) -> Path:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 2),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def loss(s: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(s)
        x = torch.randn(16, 1, 12, 12, generator=g)
        y = (x[:, :, :6].mean((1, 2, 3)) > x[:, :, 6:].mean((1, 2, 3))).long()
        return F.cross_entropy(model(x), y)

    return _train(model, opt, out, 150, loss)


def healthy_lstm_accumulation(out: Path) -> Path:
    torch.manual_seed(0)

    class Seq(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(8, 32, batch_first=True)
            self.head = nn.Linear(32, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.head(self.lstm(x)[0][:, -1])
            return out

    model = Seq()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    with gradoc.watch(model, opt, out=out) as run:
        for step in range(100):
            opt.zero_grad()
            for micro in range(3):  # gradient accumulation
                g = torch.Generator().manual_seed(step * 3 + micro)
                x = torch.randn(8, 20, 8, generator=g)
                (F.mse_loss(model(x), x[:, :, 0].mean(1, keepdim=True)) / 3).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
    return run.dir


def healthy_gru(out: Path) -> Path:
    torch.manual_seed(0)

    class Seq(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(20, 16)
            self.gru = nn.GRU(16, 32, num_layers=2, batch_first=True)
            self.head = nn.Linear(32, 3)

        def forward(self, t: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.head(self.gru(self.embed(t))[0][:, -1])
            return out

    model = Seq()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)

    def loss(s: int) -> torch.Tensor:
        t = torch.randint(0, 20, (16, 15), generator=torch.Generator().manual_seed(s))
        return F.cross_entropy(model(t), t[:, -2] % 3)  # recall a recent token

    return _train(model, opt, out, 150, loss)


def healthy_small_noisy_batches(out: Path) -> Path:
    """Batches of 8 with label noise and dropout: single-step losses swing 10x for 1,500 steps."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(20, 128),
        nn.ReLU(),
        nn.Dropout(0.3),
        nn.Linear(128, 128),
        nn.ReLU(),
        nn.Linear(128, 5),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def loss(s: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(s)
        x = torch.randn(8, 20, generator=g)
        y = (x[:, :5] + 0.5 * torch.randn(8, 5, generator=g)).argmax(1)
        return F.cross_entropy(model(x), y)

    return _train(model, opt, out, 1500, loss)


def healthy_frozen_unused(out: Path) -> Path:
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.backbone = nn.Sequential(nn.Linear(16, 64), nn.ReLU())
            self.backbone.requires_grad_(False)  # frozen, still in the optimizer
            self.head = nn.Sequential(nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 4))
            self.aux = nn.Linear(64, 4)  # never used

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.head(self.backbone(x))
            return out

    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    return _classify(model, opt, out, 200)


PATHOLOGIES: dict[str, tuple[Scenario, str, str | None]] = {
    # name: (scenario, expected kind, expected layer or None where no layer applies)
    "exploding_init": (exploding_init, "exploding_gradients", "18"),  # largest grad/weight
    "vanishing_sigmoid": (vanishing_sigmoid, "vanishing_gradients", "0"),
    "dead_relu": (dead_relu, "dead_units", "1"),
    "saturated_tanh": (saturated_tanh, "saturated_units", "3"),
    "loss_spike": (loss_spike, "loss_spike", None),
    "divergence_lr": (divergence_lr, "loss_divergence", None),
    "plateau_random_labels": (plateau_random_labels, "loss_plateau", None),
    "poor_init_small": (poor_init_small, "poor_initialization", "14"),
    "large_updates": (large_updates, "large_updates", "0"),
    "tiny_updates": (tiny_updates, "tiny_updates", "0"),
    "nonfinite_log": (nonfinite_log, "nonfinite", ""),  # log() runs in the model's own forward
}
HEALTHY: dict[str, Scenario] = {
    "transformer": healthy_transformer,
    "cnn_batchnorm": healthy_cnn_batchnorm,
    "lstm_accumulation": healthy_lstm_accumulation,
    "gru": healthy_gru,
    "small_noisy_batches": healthy_small_noisy_batches,
    "frozen_unused": healthy_frozen_unused,
}
