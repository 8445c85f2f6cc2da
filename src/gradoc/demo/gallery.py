"""The gallery: small real training runs, each a classic pathology next to its fix.

``gradoc demo --list`` lists them; ``gradoc demo NAME`` trains the problem and the fixed
version under gradoc, prints the problem's diagnosis and the two runs side by side, and
writes both run directories (``report.html`` in each). Every scenario trains on the CPU
in seconds on data generated at run time, and is also a test (``tests/test_gallery.py``)
asserting its diagnosis; the test suite's calibration set (``tests/scenarios.py``) uses
the same builders.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..analysis import Report

Train = Callable[[Path], Path]


# -- builders shared with the calibration scenarios ------------------------------------------
def mlp(
    widths: list[int],
    act: type[nn.Module],
    std: float | None = None,
    bias: float | None = None,
    he: bool = False,
) -> nn.Sequential:
    """An MLP; weights N(0, std) when ``std`` is given, He-normal when ``he``."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(widths)):
        lin = nn.Linear(a, b)
        if std is not None:
            nn.init.normal_(lin.weight, 0.0, std)
        if he:
            nn.init.kaiming_normal_(lin.weight, nonlinearity="relu")
            nn.init.zeros_(lin.bias)
        if bias is not None:
            nn.init.constant_(lin.bias, bias)
        layers.append(lin)
        if i < len(widths) - 2:
            layers.append(act())
    return nn.Sequential(*layers)


def regression_data(step: int, dim: int = 16, batch: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step)
    x = torch.randn(batch, dim, generator=g)
    return x, (x[:, :4].sum(1, keepdim=True)).sin()


def classify_data(
    step: int, dim: int = 16, batch: int = 64, classes: int = 4
) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step)
    x = torch.randn(batch, dim, generator=g)
    return x, (x[:, :classes].argmax(1))


def train(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    out: Path,
    steps: int,
    loss_fn: Callable[[int], torch.Tensor],
    **watch: object,
) -> Path:
    """Train under gradoc.watch into ``out``; stop a few steps after the loss turns NaN."""
    import gradoc

    with gradoc.watch(model, opt, out=out, **watch) as run:  # type: ignore[arg-type]
        for step in range(steps):
            opt.zero_grad()
            loss = loss_fn(step)
            loss.backward()
            opt.step()
            if not math.isfinite(loss.item()) and step > 3:
                break
    return run.dir


def classify(model: nn.Module, opt: torch.optim.Optimizer, out: Path, steps: int) -> Path:
    """Train on the 4-class task of classify_data with cross-entropy."""

    def loss(s: int) -> torch.Tensor:
        x, y = classify_data(s)
        return F.cross_entropy(model(x), y)

    return train(model, opt, out, steps, loss)


def _regress(model: nn.Module, opt: torch.optim.Optimizer, out: Path, steps: int) -> Path:
    def loss(s: int) -> torch.Tensor:
        x, y = regression_data(s)
        return F.mse_loss(model(x), y)

    return train(model, opt, out, steps, loss)


# -- the pathologies and their fixes ---------------------------------------------------------
def vanishing_sigmoid(out: Path) -> Path:
    """A 12-layer sigmoid MLP with default init: the first layers get almost no gradient."""
    torch.manual_seed(0)
    model = mlp([16] + [32] * 11 + [4], nn.Sigmoid)
    return classify(model, torch.optim.SGD(model.parameters(), lr=0.1), out, 150)


def vanishing_sigmoid_fixed(out: Path) -> Path:
    """The same depth with ReLU and He initialisation."""
    torch.manual_seed(0)
    model = mlp([16] + [32] * 11 + [4], nn.ReLU, he=True)
    return classify(model, torch.optim.SGD(model.parameters(), lr=0.01), out, 150)


def exploding_init(out: Path) -> Path:
    """A 10-layer ReLU MLP initialised from N(0, 1): gradients are huge from step 0."""
    torch.manual_seed(0)
    model = mlp([16] + [64] * 9 + [1], nn.ReLU, std=1.0)
    return _regress(model, torch.optim.SGD(model.parameters(), lr=1e-6), out, 60)


def exploding_init_fixed(out: Path) -> Path:
    """The same network with He initialisation and a learning rate it can use."""
    torch.manual_seed(0)
    model = mlp([16] + [64] * 9 + [1], nn.ReLU, he=True)
    return _regress(model, torch.optim.SGD(model.parameters(), lr=1e-3), out, 60)


def dead_relu(out: Path) -> Path:
    """A ReLU MLP whose hidden biases start at -4: most units never fire."""
    torch.manual_seed(0)
    model = mlp([16, 128, 128, 4], nn.ReLU, bias=-4.0)
    return classify(model, torch.optim.SGD(model.parameters(), lr=0.05), out, 120)


def dead_relu_fixed(out: Path) -> Path:
    """Biases at 0 (PyTorch's default would do as well)."""
    torch.manual_seed(0)
    model = mlp([16, 128, 128, 4], nn.ReLU, bias=0.0)
    return classify(model, torch.optim.SGD(model.parameters(), lr=0.05), out, 120)


def _lr_run(out: Path, lr: float) -> Path:
    torch.manual_seed(0)
    model = mlp([16, 64, 64, 1], nn.Tanh)
    opt = torch.optim.SGD(model.parameters(), lr=lr)

    def loss(s: int) -> torch.Tensor:
        x, y = regression_data(s)
        return F.mse_loss(model(x) * 3, y * 3)

    return train(model, opt, out, 150, loss)


def lr_too_high(out: Path) -> Path:
    """SGD at a learning rate of 0.35 on a regression MLP: loss and gradients blow up."""
    return _lr_run(out, 0.35)


def lr_too_high_fixed(out: Path) -> Path:
    """The same run at a learning rate of 0.02."""
    return _lr_run(out, 0.02)


class SequenceClassifier(nn.Module):
    """Reads a sequence with a recurrent layer and classifies its last state."""

    def __init__(self, cell: str) -> None:
        super().__init__()
        self.rnn: nn.RNNBase = getattr(nn, cell)(8, 64, batch_first=True)
        self.head = nn.Linear(64, 4)
        if cell == "LSTM":  # remember by default: forget-gate bias +3 (Jozefowicz et al. 2015)
            with torch.no_grad():
                self.rnn.bias_ih_l0[64:128].fill_(3.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        result: torch.Tensor = self.head(out[:, -1])
        return result


def _sequence_run(out: Path, cell: str) -> Path:
    """The class is written in the first of 60 steps; the model must carry it to the end."""
    torch.manual_seed(0)
    model = SequenceClassifier(cell)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)

    def loss(s: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(s)
        y = torch.randint(0, 4, (64,), generator=g)
        x = torch.randn(64, 60, 8, generator=g) * 0.1
        x[:, 0, :4] += 2.0 * F.one_hot(y, 4)
        return F.cross_entropy(model(x), y)

    return train(model, opt, out, 400, loss)


def rnn_long(out: Path) -> Path:
    """A vanilla (tanh) RNN over 60 steps: the signal at step 1 does not reach the end."""
    return _sequence_run(out, "RNN")


def lstm_long(out: Path) -> Path:
    """An LSTM on the same task: its gated cell state carries the signal."""
    return _sequence_run(out, "LSTM")


def _spike_run(out: Path, guard: bool) -> Path:
    torch.manual_seed(0)
    model = mlp([16, 64, 64, 4], nn.ReLU)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def loss(s: int) -> torch.Tensor:
        x, y = classify_data(s)
        if s == 150:
            x = x * 1000.0  # one corrupted batch (a unit bug upstream)
        return F.cross_entropy(model(x), y)

    return train(model, opt, out, 260, loss, guard=guard)


def loss_spike(out: Path) -> Path:
    """A healthy MLP that meets one corrupted batch (inputs scaled by 1000) at step 150."""
    return _spike_run(out, guard=False)


def loss_spike_guarded(out: Path) -> Path:
    """The same run under gradoc's guard: ZClip clips the spike's gradient."""
    return _spike_run(out, guard=True)


class SequencePool(nn.Module):
    """Pools a sequence of feature vectors into one: a sum (the bug) or a mean."""

    def __init__(self, mean: bool) -> None:
        super().__init__()
        self.mean = mean

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(1) if self.mean else x.sum(1)


class SensorRegressor(nn.Module):
    def __init__(self, mean: bool) -> None:
        super().__init__()
        self.embed = nn.Linear(16, 64)
        self.act = nn.ReLU()
        self.pool = SequencePool(mean)
        self.head = nn.Linear(64, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.pool(self.act(self.embed(x))))
        return out


def _pool_run(out: Path, mean: bool) -> Path:
    """Readings of 16 sensors over 32,768 time steps, in their raw units (~10)."""
    torch.manual_seed(0)
    model = SensorRegressor(mean)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)

    def loss(s: int) -> torch.Tensor:
        x = torch.randn(2, 32768, 16, generator=torch.Generator().manual_seed(s)) * 10
        target = x[:, :, :4].mean((1, 2))[:, None]
        scale = 1.0 if mean else 1.0 / 32768  # the sum's scale is taken out of the loss
        return F.mse_loss(model(x) * scale, target)

    return train(model, opt, out, 20, loss, check_amp=True)


def fp16_sum_overflow(out: Path) -> Path:
    """A sum over 32,768 time steps: fine in fp32, past fp16's 65504 in the pool."""
    return _pool_run(out, mean=False)


def fp16_mean_pool(out: Path) -> Path:
    """The same model pooling with a mean."""
    return _pool_run(out, mean=True)


class ReviewClassifier(nn.Module):
    """A transformer over padded token ids; ``masked`` decides whether it uses the mask."""

    def __init__(self, masked: bool) -> None:
        super().__init__()
        self.masked = masked
        self.embed = nn.Embedding(200, 32, padding_idx=0)
        layer = nn.TransformerEncoderLayer(32, 4, 64, 0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 2)

    def forward(self, t: torch.Tensor, key_padding_mask: torch.Tensor) -> torch.Tensor:
        mask = key_padding_mask if self.masked else None  # the bug: the mask never arrives
        h = self.encoder(self.embed(t), src_key_padding_mask=mask)
        keep = (~key_padding_mask)[..., None].float()
        out: torch.Tensor = self.head((h * keep).sum(1) / keep.sum(1))
        return out


def _padding_run(out: Path, masked: bool) -> Path:
    """Reviews of 2 to 48 tokens, padded per batch; the label is in the first token."""
    torch.manual_seed(0)
    model = ReviewClassifier(masked)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def loss(s: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(s)
        lengths = torch.randint(2, 49, (16,), generator=g)
        t = torch.randint(1, 200, (16, int(lengths.max())), generator=g)
        pads = torch.arange(t.shape[1]) >= lengths[:, None]
        t = t.masked_fill(pads, 0)
        return F.cross_entropy(model(t, key_padding_mask=pads), (t[:, 0] % 2).long())

    return train(model, opt, out, 60, loss, check_padding=True)


def padding_unmasked(out: Path) -> Path:
    """The attention never gets the padding mask: real tokens attend to the pads."""
    return _padding_run(out, masked=False)


def padding_masked(out: Path) -> Path:
    """The same model with src_key_padding_mask passed through."""
    return _padding_run(out, masked=True)


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    title: str
    problem: Train
    fixed: Train
    fix: str
    """What the fixed run changes."""
    expect: str
    """The finding kind the problem's diagnosis must lead with."""
    layer: str | None = None
    """The layer the finding must name, where one is named."""
    fixed_clean: bool = True
    """Whether the fixed run must be free of the expected finding."""
    cause: str | None = None
    """What the diagnosis's root cause must say, where the kind alone does not tell."""

    def describe(self) -> str:  # what print_comparison says the fix is
        return self.fix


GALLERY = {
    s.name: s
    for s in (
        Scenario(
            "vanishing-sigmoid",
            "12-layer sigmoid MLP: vanishing gradients (vs ReLU + He init)",
            vanishing_sigmoid,
            vanishing_sigmoid_fixed,
            "ReLU activations + He initialisation",
            "vanishing_gradients",
            "0",
        ),
        Scenario(
            "exploding-init",
            "10-layer ReLU MLP initialised from N(0, 1): exploding gradients (vs He init)",
            exploding_init,
            exploding_init_fixed,
            "He initialisation",
            "exploding_gradients",
        ),
        Scenario(
            "dead-relu",
            "ReLU MLP with hidden biases at -4: dead units (vs biases at 0)",
            dead_relu,
            dead_relu_fixed,
            "biases initialised to 0",
            "dead_units",
            "1",
        ),
        Scenario(
            "lr-too-high",
            "SGD with a learning rate far too high (0.35): gradients and loss blow up (vs 0.02)",
            lr_too_high,
            lr_too_high_fixed,
            "learning rate 0.35 -> 0.02",
            "loss_blowup",
            cause="learning rate too high",
        ),
        Scenario(
            "rnn-vs-lstm",
            "vanilla RNN over 60 steps: gradients vanish through time, the loss stays at "
            "chance (vs LSTM)",
            rnn_long,
            lstm_long,
            "LSTM (gated) instead of a vanilla RNN",
            "loss_plateau",
            cause="an ungated recurrence",
        ),
        Scenario(
            "fp16-overflow",
            "mixed-precision readiness: an unscaled sum over 32,768 steps overflows fp16 "
            "(vs a mean)",
            fp16_sum_overflow,
            fp16_mean_pool,
            "a mean instead of a sum in the pool",
            "fp16_overflow",
            "pool",
        ),
        Scenario(
            "padding-leak",
            "transformer over padded batches without its key padding mask (vs with it)",
            padding_unmasked,
            padding_masked,
            "src_key_padding_mask passed to the encoder",
            "padding_leak",
            "encoder.layers.0.self_attn",
        ),
        Scenario(
            "loss-spike",
            "one corrupted batch at step 150: a loss spike (vs the same run guarded)",
            loss_spike,
            loss_spike_guarded,
            "gradoc's guard (ZClip clips the spike's gradient)",
            "loss_spike",
            fixed_clean=False,  # the corrupted batch's own loss still spikes; the damage not
        ),
    )
}


def run(name: str, out: Path | None, fixed: bool = False) -> int:
    """Train a scenario's problem and fixed runs; print the diagnosis and the comparison."""
    from rich.console import Console

    from ..collect import prepare_run_dir
    from ..fix import compare
    from ..report import print_comparison, print_run_summary

    scenario = GALLERY[name]
    console = Console()
    base = prepare_run_dir(out, f"demo-{name}")
    console.print(f"[bold]gradoc demo {name}[/]: {scenario.title}", highlight=False)
    if fixed:
        scenario.fixed(base)
        report = _report(base)
        print_run_summary(base, report, stderr=False)
        console.print(f"report   {base / 'report.html'}", highlight=False)
        return 0
    fixed_dir = base.with_name(base.name + "-fixed")
    with console.status(f"training the problem: {scenario.problem.__doc__}"):
        scenario.problem(base)
    with console.status(f"training the fix ({scenario.fix})"):
        scenario.fixed(prepare_run_dir(fixed_dir))
    before, after = _report(base), _report(fixed_dir)
    print_run_summary(base, before, stderr=False)
    console.print()
    print_comparison(compare(base, before, fixed_dir, after), scenario, [], console)
    console.print(f"report   {base / 'report.html'}", highlight=False)
    console.print(f"fixed    {fixed_dir / 'report.html'}", highlight=False)
    return 0


def _report(run_dir: Path) -> Report:
    from ..report import read_report

    return read_report(run_dir / "report.json")
