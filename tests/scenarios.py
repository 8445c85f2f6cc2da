"""Labelled training scenarios: small real runs, each a known pathology or a healthy control.

Each function trains for a few seconds on the CPU under gradoc.watch and returns the
run directory. ``EXPECTED`` says what a correct diagnosis finds in each.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

import gradoc
from gradoc.demo.gallery import (
    classify,
    classify_data,
    dead_relu,
    exploding_init,
    loss_spike,
    mlp,
    train,
    vanishing_sigmoid,
)
from gradoc.demo.gallery import lr_too_high as divergence_lr

Scenario = Callable[[Path], Path]


def saturated_tanh(out: Path) -> Path:
    """A tanh MLP initialised with std 1 on wide layers: most pre-activations are far past 3."""
    torch.manual_seed(0)
    model = mlp([16, 256, 256, 256, 4], nn.Tanh, std=1.0)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    return classify(model, opt, out, 120)


def plateau_random_labels(out: Path) -> Path:
    """Labels independent of the inputs: the loss stays at ln(4) however long it trains."""
    torch.manual_seed(0)
    model = mlp([16, 64, 4], nn.ReLU)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def loss(s: int) -> torch.Tensor:
        x, _ = classify_data(s)
        y = torch.randint(0, 4, (x.shape[0],), generator=torch.Generator().manual_seed(10_000 + s))
        return F.cross_entropy(model(x), y)

    return train(model, opt, out, 400, loss)


def poor_init_small(out: Path) -> Path:
    """An 8-layer tanh MLP initialised with std 0.01 and zero biases: activations shrink
    ~12x a layer (gain 0.01 * sqrt(64))."""
    torch.manual_seed(0)
    model = mlp([16] + [64] * 7 + [4], nn.Tanh, std=0.01, bias=0.0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    return classify(model, opt, out, 40)


def large_updates(out: Path) -> Path:
    """SGD at learning rate 50: each update is many times the weights it changes."""
    torch.manual_seed(0)
    model = mlp([16, 32, 4], nn.ReLU)
    opt = torch.optim.SGD(model.parameters(), lr=50.0)
    return classify(model, opt, out, 40)


def tiny_updates(out: Path) -> Path:
    """A learning rate of 1e-11: the weights never move."""
    torch.manual_seed(0)
    model = mlp([16, 64, 4], nn.ReLU)
    opt = torch.optim.SGD(model.parameters(), lr=1e-11)
    return classify(model, opt, out, 60)


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
    return classify(model, opt, out, 10)


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

    return train(model, opt, out, 150, loss)


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

    return train(model, opt, out, 150, loss)


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

    return train(model, opt, out, 150, loss)


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

    return train(model, opt, out, 1500, loss)


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
    return classify(model, opt, out, 200)


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
