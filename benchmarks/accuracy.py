"""Diagnosis accuracy on a generated, labelled corpus, scored on a held-out split.

The corpus is a matrix: 9 architectures x 15 fault families x seeds and sizes, plus
healthy runs of the same architectures with realistic recipes. Every run trains on the CPU
in about a second under ``gradoc.watch`` on data generated here, and its label says what
a correct diagnosis contains.

Architectures: an MLP, a CNN, a CNN with BatchNorm, a ResNet, an LSTM/GRU (LSTM on even
seeds), a transformer encoder (nn.TransformerEncoder), a small causal decoder, an
attention model written by hand, and a model of raw tensors (nn.Parameter and
torch.relu, no submodules but its readout).

Fault families (the label's root-cause family in brackets):

- ``lr_sgd``, ``lr_momentum``, ``lr_adam``: the learning rate far too high [learning_rate]
- ``late_growth``: a schedule that keeps raising the learning rate after step 40 [learning_rate]
- ``init_normal``: every weight N(0, 1) [initialization]
- ``init_zero``: every weight and bias 0 [initialization]
- ``neg_bias``: biases of -4 in front of the ReLUs [initialization]
- ``saturating``: a deep sigmoid (even seeds) or tanh (odd seeds) stack [architecture]
- ``num_forward``: division by 0, log of 0 or 0 ** -0.5 in the readout's forward [numerics]
- ``num_backward``: sqrt(0) or 0 ** 0.5 whose gradient is inf [numerics]
- ``num_loss``: exp overflow in a hand-written softmax, or a batch whose targets are all
  ignore_index, in the loss, from step 20 on every 4th step [numerics] (a NaN born
  outside the model is located on its next occurrence, so these runs ask for
  ``skip_nonfinite_updates=True``; a one-off one needs a re-run)
- ``data_nan``: a NaN in one input batch [data]
- ``bad_batch``: one mislabelled batch late in training [data]
- ``fp16_range``: inputs at raw-sensor scale (3e4) into a convolution that BatchNorm
  normalises (fine in fp32, past 65504 in fp16), under ``check_amp`` [precision]
- ``no_mask``: attention that ignores the padding mask, under ``check_padding`` [masking]

Healthy recipes: Adam, warm-up + cosine, SGD with momentum and clipping, AdamW with weight
decay, label smoothing, dropout, small noisy batches (4), fine-tuning a trained model.

A label holds: the kinds that must be found, the headline kinds a correct diagnosis may
lead with (more than one where the physics allows either: a learning rate that overflows
to NaN is headlined ``nonfinite``, one that does not, ``loss_blowup``), the layer, the
onset step range, the origin (phase, op, the line in this file), the layer (where one
layer is the answer: the module running the unsafe op, the head whose logits start too
large, the ReLU layers behind a negative bias, the first convolution past fp16's range)
and the root-cause family. Facts the label needs that depend on the run (did the loss go
non-finite, did it rise 100x) come from the training loop itself, not from gradoc. A
fault whose effect did not take (a learning rate that happened to train) is counted and
left out, not scored.

Splits: ``calibration`` is seed 0 at width 32; ``held-out`` is seeds 1 and 2 at width
48. Rules are tuned on the calibration split only; the table in the README is the
held-out split.

    python benchmarks/accuracy.py                      # held-out split, the table
    python benchmarks/accuracy.py --split calibration  # what rules may be tuned on
    python benchmarks/accuracy.py --quick              # one run per family (CI)
    python benchmarks/accuracy.py --only mlp:lr_adam   # some runs, with their headlines
    python benchmarks/accuracy.py --sample-every 50    # the rules on sparse samples
    python benchmarks/accuracy.py --grads-every 5      # the rules on lean per-step reads
    python benchmarks/accuracy.py --long               # faults at step 1,200 of 2,000: every
                                                       # step against a lean cadence (10)
    python benchmarks/accuracy.py --real               # ../shared/real-programs, same table
    python benchmarks/accuracy.py --real makemore_lr_x1000 timeseq_mape_div0

``--real`` runs the public programs of ``../shared/real-programs`` (each case's ``run.sh``
under ``gradoc run``, as a user would; ~9 minutes for all 24) and scores each report with
the suite's own ``check.py`` (its verdict is the "suite" column), and with this file's
measures: the headline kind among the case's accepted kinds, the root cause containing
the expected words, false alarms on the healthy programs.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import math
import sys
import tempfile
import time
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

import gradoc

warnings.filterwarnings("ignore")

ARCHS = (
    "mlp",
    "cnn",
    "cnn_bn",
    "resnet",
    "rnn",
    "transformer",
    "decoder",
    "attention",
    "raw",
)
FLOAT = {"mlp", "cnn", "cnn_bn", "resnet", "rnn", "raw"}  # archs with float inputs
TOKENS = {"transformer", "decoder", "attention"}
CLASSES, VOCAB, DIM, SEQ, BATCH, STEPS = 4, 16, 16, 12, 32, 100
LR_FAMILY = ("loss_blowup", "loss_divergence", "exploding_gradients", "large_updates", "nonfinite")

SPLITS = {"calibration": ((0,), 32), "held-out": ((1, 2), 48)}


# -- the labels ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Fault:
    family: str  # root-cause family of the label
    headline: tuple[str, ...]
    kinds: tuple[str, ...] = ()
    archs: frozenset[str] = frozenset(ARCHS)
    onset: tuple[int, int] = (0, STEPS)
    watch: tuple[tuple[str, object], ...] = ()


HAZARD_STEP = 20  # where the numerics and data faults strike (+ 3 * seed)
BAD_BATCH_STEP = 70
LATE_AT = 40  # where late_growth starts raising the learning rate
LR_AT = 0  # where the lr_* faults' learning rate takes over (the long split's is late)

FAULTS: dict[str, Fault] = {
    "lr_sgd": Fault("learning_rate", LR_FAMILY, onset=(0, 40)),
    "lr_momentum": Fault("learning_rate", LR_FAMILY, onset=(0, 40)),
    "lr_adam": Fault("learning_rate", LR_FAMILY, onset=(0, 40)),
    "late_growth": Fault("learning_rate", LR_FAMILY, onset=(LATE_AT, STEPS)),
    "init_normal": Fault(
        "initialization",
        ("exploding_gradients", "poor_initialization", "saturated_units", "loss_blowup"),
        onset=(0, 1),
    ),
    "init_zero": Fault(
        "initialization",
        ("dead_units", "vanishing_gradients", "tiny_updates", "loss_plateau"),
        onset=(0, 1),
    ),
    "neg_bias": Fault(
        "initialization",
        ("dead_units",),
        kinds=("dead_units",),
        archs=frozenset({"mlp", "cnn", "raw", "transformer", "attention", "decoder"}),
        onset=(0, 1),
    ),
    "saturating": Fault(
        "architecture",
        ("vanishing_gradients", "saturated_units", "loss_plateau"),
        archs=frozenset({"mlp", "cnn", "raw"}),
        onset=(0, 1),
    ),
    "num_forward": Fault("numerics", ("nonfinite",), kinds=("nonfinite",)),
    "num_backward": Fault("numerics", ("nonfinite",), kinds=("nonfinite",)),
    # a NaN born in the loss, outside the model, is caught in-process on its next
    # occurrence, which only a skipped update allows: gradoc observes by default (the
    # NaN update is applied), so these runs ask for skipping as a gradoc.watch user would
    # (gradoc run re-runs the script instead)
    "num_loss": Fault(
        "numerics",
        ("nonfinite",),
        kinds=("nonfinite",),
        watch=(("skip_nonfinite_updates", True),),
    ),
    "data_nan": Fault("data", ("nonfinite",), kinds=("nonfinite",), archs=frozenset(FLOAT)),
    "bad_batch": Fault(
        "data",
        ("loss_spike",),
        kinds=("loss_spike",),
        onset=(BAD_BATCH_STEP, BAD_BATCH_STEP + 1),
    ),
    "fp16_range": Fault(
        "precision",
        ("fp16_overflow",),
        kinds=("fp16_overflow",),
        archs=frozenset({"cnn_bn", "resnet"}),
        watch=(("check_amp", True),),
    ),
    "no_mask": Fault(
        "masking",
        ("padding_leak",),
        kinds=("padding_leak",),
        archs=frozenset({"transformer", "attention"}),
        watch=(("check_padding", True),),
    ),
}
RECIPES = (
    "adam",
    "warmup_cosine",
    "clip",
    "weight_decay",
    "label_smoothing",
    "dropout",
    "small_batch",
    "finetune",
)


@dataclass(frozen=True, slots=True)
class Spec:
    arch: str
    fault: str  # a FAULTS key, or "healthy:<recipe>"
    seed: int
    width: int

    @property
    def name(self) -> str:
        return f"{self.arch}:{self.fault}:s{self.seed}:w{self.width}"

    @property
    def healthy(self) -> bool:
        return self.fault.startswith("healthy")

    @property
    def recipe(self) -> str:
        return self.fault.split(":", 1)[1] if self.healthy else "adam"

    @property
    def variant(self) -> int:
        return self.seed % 2


def corpus(split: str) -> list[Spec]:
    seeds, width = SPLITS[split]
    specs = []
    for seed in seeds:
        for i, arch in enumerate(ARCHS):
            specs += [Spec(arch, k, seed, width) for k, f in FAULTS.items() if arch in f.archs]
            for j in range(3):
                recipe = RECIPES[(i + 3 * seed + 3 * j) % len(RECIPES)]
                specs.append(Spec(arch, f"healthy:{recipe}", seed, width))
    return specs


# -- the models ------------------------------------------------------------------------------
class Readout(nn.Module):
    """Pooled features -> logits; scales them by ``count`` (how many inputs were valid),
    where the numerics faults live."""

    def __init__(self, width: int, out: int, hazard: str | None) -> None:
        super().__init__()
        self.hazard = hazard
        self.gain = nn.Parameter(torch.ones(()))
        self.fc = nn.Linear(width, out)

    def forward(self, h: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        c = count.view(-1, *([1] * (h.dim() - 1)))
        if self.hazard == "div":
            h = h / (c / 16)  # hazard: div
        elif self.hazard == "log":
            h = h + torch.log(c)  # hazard: log
        elif self.hazard == "pow":
            h = h * c.pow(-0.5)  # hazard: pow
        elif self.hazard == "sqrt":
            h = h * torch.sqrt(c * self.gain)  # hazard: sqrt
        elif self.hazard == "pow_bwd":
            h = h * (c * self.gain) ** 0.5  # hazard: pow_bwd
        return self.fc(h)


HAZARDS = {  # name -> (phase, op)
    "div": ("forward", "aten.div.Tensor"),
    "log": ("forward", "aten.log.default"),
    "pow": ("forward", "aten.pow.Tensor_Scalar"),
    "sqrt": ("backward", "SqrtBackward0"),
    "pow_bwd": ("backward", "PowBackward0"),
    "exp": ("forward", "aten.exp.default"),
    "ignore_all": ("forward", "aten.nll_loss_forward.default"),
    "ignore_all_lm": ("forward", "aten.nll_loss_forward.default"),
    "nan_input": ("input", None),
}


def _hazard_lines() -> dict[str, int]:
    lines = Path(__file__).read_text().splitlines()
    return {
        line.split("# hazard: ")[1].strip(): n
        for n, line in enumerate(lines, 1)
        if "# hazard: " in line and "split(" not in line
    }


HAZARD_LINE = _hazard_lines()


def act_of(spec: Spec) -> type[nn.Module]:
    if spec.fault == "saturating":
        return nn.Sigmoid if spec.variant == 0 else nn.Tanh
    return nn.ReLU


def depth_of(spec: Spec) -> int:
    return 10 if spec.fault == "saturating" else 3


class MLP(nn.Module):
    def __init__(self, spec: Spec, hazard: str | None, p: float) -> None:
        super().__init__()
        w, layers, d = spec.width, [], DIM
        for _ in range(depth_of(spec)):
            layers += [nn.Linear(d, w), act_of(spec)(), nn.Dropout(p)]
            d = w
        self.body = nn.Sequential(*layers)
        self.readout = Readout(w, CLASSES, hazard)

    def forward(self, x: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        return self.readout(self.body(x), count)


class Raw(nn.Module):
    """A from-scratch model: raw parameters, torch's functional activations."""

    def __init__(self, spec: Spec, hazard: str | None, p: float) -> None:
        super().__init__()
        w, d = spec.width, DIM
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for _ in range(depth_of(spec)):
            self.weights.append(nn.Parameter(torch.randn(d, w) / math.sqrt(d)))
            self.biases.append(nn.Parameter(torch.zeros(w)))
            d = w
        self.act = {nn.ReLU: torch.relu, nn.Sigmoid: torch.sigmoid, nn.Tanh: torch.tanh}[
            act_of(spec)
        ]
        self.p = p
        self.readout = Readout(w, CLASSES, hazard)

    def forward(self, x: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        for weight, bias in zip(self.weights, self.biases):
            x = F.dropout(self.act(x @ weight + bias), self.p, self.training)
        return self.readout(x, count)


class CNN(nn.Module):
    def __init__(self, spec: Spec, hazard: str | None, p: float, bn: bool) -> None:
        super().__init__()
        c, layers, d = spec.width // 2, [], 1
        for _ in range(depth_of(spec)):
            layers.append(nn.Conv2d(d, c, 3, padding=1))
            if bn:
                layers.append(nn.BatchNorm2d(c))
            layers += [act_of(spec)(), nn.Dropout(p)]
            d = c
        self.body = nn.Sequential(*layers)
        self.readout = Readout(c, CLASSES, hazard)

    def forward(self, x: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        return self.readout(self.body(x).mean((2, 3)), count)


class Block(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))))


class ResNet(nn.Module):
    def __init__(self, spec: Spec, hazard: str | None, p: float) -> None:
        super().__init__()
        c = spec.width // 2
        self.stem = nn.Sequential(nn.Conv2d(1, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU())
        self.blocks = nn.Sequential(Block(c), Block(c))
        self.drop = nn.Dropout(p)
        self.readout = Readout(c, CLASSES, hazard)

    def forward(self, x: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        return self.readout(self.drop(self.blocks(self.stem(x)).mean((2, 3))), count)


class RNN(nn.Module):
    def __init__(self, spec: Spec, hazard: str | None, p: float) -> None:
        super().__init__()
        cell = nn.LSTM if spec.variant == 0 else nn.GRU
        self.rnn = cell(4, spec.width, batch_first=True)
        self.drop = nn.Dropout(p)
        self.readout = Readout(spec.width, CLASSES, hazard)

    def forward(self, x: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        last = count.long().clamp(min=1) - 1
        h = out[torch.arange(len(x)), last]
        return self.readout(self.drop(h), count)


class Transformer(nn.Module):
    def __init__(self, spec: Spec, hazard: str | None, p: float) -> None:
        super().__init__()
        w = spec.width
        self.mask = spec.fault != "no_mask"
        self.embed = nn.Embedding(VOCAB, w, padding_idx=0)
        self.pos = nn.Parameter(torch.randn(SEQ, w) * 0.02)
        layer = nn.TransformerEncoderLayer(w, 2, 2 * w, dropout=p, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.readout = Readout(w, CLASSES, hazard)

    def forward(self, tokens: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        pad = tokens == 0
        h = self.encoder(
            self.embed(tokens) + self.pos, src_key_padding_mask=pad if self.mask else None
        )
        keep = (~pad).unsqueeze(-1).float()
        return self.readout((h * keep).sum(1) / keep.sum(1).clamp(min=1), count)


class Attention(nn.Module):
    """Single-head attention and a feed-forward block, written by hand."""

    def __init__(self, spec: Spec, hazard: str | None, p: float, causal: bool = False) -> None:
        super().__init__()
        w = spec.width
        self.mask, self.causal, self.p = spec.fault != "no_mask", causal, p
        self.embed = nn.Embedding(VOCAB, w, padding_idx=0)
        self.pos = nn.Parameter(torch.randn(SEQ, w) * 0.02)
        self.blocks = nn.ModuleList()
        for _ in range(2):
            self.blocks.append(
                nn.ModuleDict(
                    {
                        "ln1": nn.LayerNorm(w),
                        "qkv": nn.Linear(w, 3 * w),
                        "proj": nn.Linear(w, w),
                        "ln2": nn.LayerNorm(w),
                        "fc1": nn.Linear(w, 2 * w),
                        "fc2": nn.Linear(2 * w, w),
                    }
                )
            )
        self.ln = nn.LayerNorm(w)
        self.readout = Readout(w, VOCAB if causal else CLASSES, hazard)

    def forward(self, tokens: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        pad = tokens == 0
        h = self.embed(tokens) + self.pos[: tokens.shape[1]]
        t = tokens.shape[1]
        for b in self.blocks:
            q, k, v = b["qkv"](b["ln1"](h)).chunk(3, -1)
            scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
            if self.causal:
                scores = scores.masked_fill(torch.ones(t, t).triu(1).bool(), float("-inf"))
            elif self.mask:
                scores = scores.masked_fill(pad[:, None, :], float("-inf"))
            att = F.dropout(torch.softmax(scores, -1), self.p, self.training)
            h = h + b["proj"](att @ v)
            h = h + b["fc2"](F.relu(b["fc1"](b["ln2"](h))))
        h = self.ln(h)
        if self.causal:
            return self.readout(h, count)
        keep = (~pad).unsqueeze(-1).float()
        return self.readout((h * keep).sum(1) / keep.sum(1).clamp(min=1), count)


def build(spec: Spec, hazard: str | None) -> nn.Module:
    p = 0.1 if spec.recipe == "dropout" else 0.0
    a = spec.arch
    model: nn.Module
    if a == "mlp":
        model = MLP(spec, hazard, p)
    elif a == "raw":
        model = Raw(spec, hazard, p)
    elif a in ("cnn", "cnn_bn"):
        model = CNN(spec, hazard, p, bn=a == "cnn_bn")
    elif a == "resnet":
        model = ResNet(spec, hazard, p)
    elif a == "rnn":
        model = RNN(spec, hazard, p)
    elif a == "transformer":
        model = Transformer(spec, hazard, p)
    else:
        model = Attention(spec, hazard, p, causal=a == "decoder")
    with torch.no_grad():
        if spec.fault == "init_normal":
            for name, param in model.named_parameters():
                if param.dim() > 1 and "pos" not in name:
                    param.normal_(0.0, 1.0)
        elif spec.fault == "init_zero":
            for name, param in model.named_parameters():
                owner = model.get_submodule(name.rpartition(".")[0])
                if not isinstance(owner, (nn.LayerNorm, nn.BatchNorm2d, Readout)):
                    param.zero_()  # all but the norms' affine terms and the readout's gain
        elif spec.fault == "neg_bias":
            for name, param in model.named_parameters():
                if _feeds_relu(a, name):
                    param.fill_(-4.0)
    return model


def _feeds_relu(arch: str, name: str) -> bool:
    if arch in ("mlp", "cnn"):
        return name.startswith("body.") and name.endswith(".bias")
    if arch == "raw":
        return name.startswith("biases.")
    if arch == "transformer":
        return name.endswith("linear1.bias")
    return name.endswith("fc1.bias")  # attention, decoder


# -- the data --------------------------------------------------------------------------------
Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # inputs, targets, count


def batch(spec: Spec, step: int, size: int) -> Batch:
    g = torch.Generator().manual_seed(100_003 * spec.seed + step)
    a = spec.arch
    if a in ("mlp", "raw"):
        x = torch.randn(size, DIM, generator=g)
        return x, x[:, :CLASSES].argmax(1), torch.full((size,), float(DIM))
    if a in ("cnn", "cnn_bn", "resnet"):
        x = torch.randn(size, 1, 8, 8, generator=g)
        # the brightness quartile: what global pooling keeps (sum of 64 N(0, 1): std 8)
        y = torch.bucketize(x.sum((1, 2, 3)), torch.tensor([-5.4, 0.0, 5.4]))
        return x, y, torch.full((size,), 64.0)
    lengths = torch.randint(4, SEQ + 1, (size,), generator=g)
    valid = torch.arange(SEQ)[None, :] < lengths[:, None]
    if a == "rnn":
        x = torch.randn(size, SEQ, 4, generator=g) * valid[..., None]
        y = (x.sum(1) / lengths[:, None]).argmax(1)
        return x, y, lengths.float()
    if a == "decoder":
        start = torch.randint(1, VOCAB, (size, 1), generator=g)
        stride = torch.randint(1, 4, (size, 1), generator=g)
        seq = (start + stride * torch.arange(SEQ + 1)) % (VOCAB - 1) + 1
        return seq[:, :-1], seq[:, 1:], torch.full((size,), float(SEQ))
    tokens = torch.randint(1, VOCAB, (size, SEQ), generator=g) * valid
    counts = F.one_hot(tokens % CLASSES, CLASSES).mul(valid[..., None]).sum(1)
    return tokens, counts.argmax(1), lengths.float()


def inject(spec: Spec, step: int, b: Batch) -> Batch:
    """The data side of the faults: degenerate samples, NaN, bad labels, raw scale."""
    x, y, count = b
    k = HAZARD_STEP + 3 * spec.seed
    if spec.fault in ("num_forward", "num_backward") and step == k:
        x, count = x.clone(), count.clone()
        x[0], count[0] = 0, 0  # a sample with nothing valid in it
        if spec.arch in TOKENS:
            x[0, 0] = 1  # attention needs one real token
    elif spec.fault == "num_loss" and step >= k and (step - k) % 4 == 0:
        if hazard_of(spec) != "exp":
            y = torch.full_like(y, -100)  # every target ignored
        else:
            x = x.clone()
            x[0] *= 1e4  # an extreme sample: its logits overflow exp
    elif spec.fault == "data_nan" and step == k:
        x = x.clone()
        x.view(len(x), -1)[0, 0] = float("nan")
    elif spec.fault == "bad_batch" and step == BAD_BATCH_STEP:
        y = torch.where(y >= 0, (y + 1) % (VOCAB if spec.arch == "decoder" else CLASSES), y)
    if spec.fault == "fp16_range":
        x = x * 3e4
    return x, y, count


def layer_of(spec: Spec) -> tuple[str | None, ...] | None:
    """The layers the headline may name (a trailing ``*``: any layer under that prefix),
    or None where no single layer is the answer (a learning rate, a zero init)."""
    f, a = spec.fault, spec.arch
    if f in ("num_forward", "num_backward"):
        return ("readout",)  # where the op runs
    if f == "num_loss":
        return (None,)  # outside the model
    if f == "init_normal":
        return ("readout.fc",)  # the head whose logits start too large
    if f == "fp16_range":
        return ("body.0",) if a == "cnn_bn" else ("stem.0",)  # the first convolution
    if f == "neg_bias":
        if a in ("mlp", "cnn"):
            return ("body.0", "body.1", "body.3", "body.4", "body.6", "body.7")
        if a == "transformer":
            return ("encoder.layers.*",)
        if a in ("attention", "decoder"):
            return ("blocks.*",)
    return None


def _layer_ok(layer: str | None, accepted: tuple[str | None, ...]) -> bool:
    for want in accepted:
        if want is None or layer is None:
            if want is layer:
                return True
        elif (want.endswith("*") and layer.startswith(want[:-1])) or layer == want:
            return True
    return False


def hazard_of(spec: Spec) -> str | None:
    if spec.fault == "num_forward":
        return ("div", "log", "pow")[spec.seed % 3]
    if spec.fault == "num_backward":
        return ("sqrt", "pow_bwd")[spec.seed % 2]
    if spec.fault == "num_loss":
        if spec.arch == "decoder":
            return "ignore_all_lm"
        return "exp" if spec.arch in ("mlp", "raw", "cnn") else "ignore_all"
    if spec.fault == "data_nan":
        return "nan_input"
    return None


def loss_of(spec: Spec, logits: torch.Tensor, y: torch.Tensor, hazard: str | None) -> torch.Tensor:
    smoothing = 0.1 if spec.recipe == "label_smoothing" else 0.0
    if hazard == "exp":
        e = torch.exp(logits)  # hazard: exp
        p = e / e.sum(1, keepdim=True)
        return -torch.log(p[torch.arange(len(y)), y]).mean()
    if spec.arch == "decoder":
        flat, s = logits.flatten(0, 1), smoothing
        return F.cross_entropy(flat, y.flatten(), label_smoothing=s)  # hazard: ignore_all_lm
    return F.cross_entropy(logits, y, label_smoothing=smoothing)  # hazard: ignore_all


# -- training --------------------------------------------------------------------------------
def optimizer(spec: Spec, model: nn.Module) -> tuple[torch.optim.Optimizer, Any]:
    params = model.parameters()
    fault, recipe = spec.fault, spec.recipe
    # Adam at 1e-2 killed 60% of a CNN's ReLU channels: not a healthy recipe there
    base = 1e-2 if spec.arch in ("mlp", "raw", "rnn") else 3e-3
    if fault == "lr_sgd":
        opt: torch.optim.Optimizer = torch.optim.SGD(params, lr=50.0)
    elif fault == "lr_momentum":
        opt = torch.optim.SGD(params, lr=10.0, momentum=0.9)
    elif fault == "lr_adam":
        opt = torch.optim.Adam(params, lr=3.0)
    elif fault == "fp16_range":
        opt = torch.optim.Adam(params, lr=1e-3)
    elif recipe == "clip":
        opt = torch.optim.SGD(params, lr=0.05, momentum=0.9)
    elif recipe in ("weight_decay", "warmup_cosine"):
        opt = torch.optim.AdamW(params, lr=base, weight_decay=0.1)
    elif recipe == "finetune":
        opt = torch.optim.Adam(params, lr=base / 10)
    else:
        opt = torch.optim.Adam(params, lr=base / 3 if recipe == "small_batch" else base)
    if fault == "late_growth":
        sched: Any = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: 1.0 if s < LATE_AT else 1.15 ** (s - LATE_AT)
        )
    elif fault.startswith("lr_") and LR_AT:  # the long split: trains well, then the jump
        healthy = {"lr_sgd": 0.05, "lr_momentum": 0.01, "lr_adam": base}[fault]
        calm = healthy / opt.param_groups[0]["lr"]
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: calm if s < LR_AT else 1.0)
    elif recipe == "warmup_cosine":
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: min(1.0, (s + 1) / 10) * 0.5 * (1 + math.cos(math.pi * s / STEPS))
        )
    else:
        sched = None
    return opt, sched


@dataclass(slots=True)
class Outcome:
    spec: Spec
    report: dict[str, Any]
    losses: list[float]
    took: bool  # the fault's effect happened (the loop's own check)
    physical: set[str] = field(default_factory=set)  # kinds the loop itself saw
    seconds: float = 0.0


GRADS: Any = None
"""The gradients' schedule, when not gradoc's default. ``--grads-every N``: every N steps
from the start (the loss every step), as a lean cadence reads them from step 200 on steps
too short for them (``gradoc.lean``): whether the rules detect, onset and locate as well on
such reads. ``--long``: every step in one arm, ``gradoc.lean(every=K)`` in the other."""

ONSET_SLACK = 0
"""Steps a finding's onset may lie past its labelled range: the long split's lean arm reads
the gradients every K steps, so a finding made from them can be at most K - 1 late."""

SAMPLE_EVERY: int | None = None
"""``--sample-every N``: weights, updates and activations sampled every N steps from the
start, where the sampling budget (``gradoc.budget``) samples every 10 steps to step 200 and
then every k: whether the rules hold on samples as sparse as a long run's."""


def train(spec: Spec, out: Path) -> Outcome:
    torch.manual_seed(spec.seed)
    hazard = hazard_of(spec)
    model = build(spec, hazard if hazard in ("div", "log", "pow", "sqrt", "pow_bwd") else None)
    size = 4 if spec.recipe == "small_batch" else BATCH
    if spec.recipe == "finetune":  # a trained model, before anyone watches it
        pre, _ = optimizer(Spec(spec.arch, "healthy:adam", spec.seed, spec.width), model)
        for step in range(150):
            x, y, c = batch(spec, 10_000 + step, size)
            pre.zero_grad()
            loss_of(spec, model(x, c), y, None).backward()
            pre.step()
    opt, sched = optimizer(spec, model)
    t0 = time.perf_counter()
    losses: list[float] = []
    nonfinite_grads = False
    watch: dict[str, Any] = dict(FAULTS[spec.fault].watch) if not spec.healthy else {}
    if SAMPLE_EVERY is not None:  # --sample-every: sparser samples than the budget's first
        watch |= {"params": gradoc.every(SAMPLE_EVERY), "activations": gradoc.every(SAMPLE_EVERY)}
    if GRADS is not None:
        watch |= {"grads": GRADS}
    with gradoc.watch(model, opt, out=out, **watch):
        for step in range(STEPS):
            x, y, c = inject(spec, step, batch(spec, step, size))
            opt.zero_grad()
            loss = loss_of(spec, model(x, c), y, hazard)
            loss.backward()
            if spec.recipe == "clip":
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            nonfinite_grads |= any(
                p.grad is not None and not bool(torch.isfinite(p.grad).all())
                for p in model.parameters()
            )
            opt.step()
            if sched is not None:
                sched.step()
            losses.append(loss.item())
            first_bad = next((i for i, v in enumerate(losses) if not math.isfinite(v)), None)
            if first_bad is not None and step >= first_bad + 8:
                break  # as a person would: stop a few steps after the loss turned NaN
    report = json.loads((out / "report.json").read_text())
    physical: set[str] = set()
    finite = [v for v in losses if math.isfinite(v)]
    if nonfinite_grads or len(finite) < len(losses):
        physical.add("nonfinite")
    start = min(losses[:3]) if all(math.isfinite(v) for v in losses[:3]) else None
    if start and finite and max(finite) >= 100 * start:
        physical.add("loss_blowup")
    return Outcome(
        spec, report, losses, _took(spec, losses, physical), physical, time.perf_counter() - t0
    )


def _took(spec: Spec, losses: list[float], physical: set[str]) -> bool:
    """The fault's effect, judged by the loop from the loss alone (not by gradoc)."""
    f = spec.fault
    finite = [v for v in losses if math.isfinite(v)]
    if LR_AT and (f.startswith("lr_") or f == "late_growth"):  # the long split: after the jump
        before = statistics_median(losses[LR_AT - 20 : LR_AT])
        after = [v for v in losses[LR_AT:] if math.isfinite(v)] or [math.inf]
        return "nonfinite" in physical or max(after) > 3 * before or min(after) > 1.5 * before
    if f.startswith("lr_") or f == "late_growth":
        tail = finite[len(finite) // 2 :] or [math.inf]
        return "nonfinite" in physical or max(finite) > 3 * losses[0] or min(tail) > 0.7 * losses[0]
    if f in ("num_forward", "num_backward", "num_loss", "data_nan"):
        return "nonfinite" in physical
    if f == "init_zero" or f == "saturating":
        return min(finite[-20:]) > 0.8 * losses[0]
    if f == "init_normal":
        chance = math.log(VOCAB if spec.arch == "decoder" else CLASSES)
        return losses[0] > 1.5 * chance or "loss_blowup" in physical
    if f == "bad_batch":
        before = statistics_median(losses[BAD_BATCH_STEP - 10 : BAD_BATCH_STEP])
        return losses[BAD_BATCH_STEP] > 3 * before
    return True


def statistics_median(values: list[float]) -> float:
    s = sorted(values)
    return s[len(s) // 2]


# -- scoring ---------------------------------------------------------------------------------
def serious(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["severity"] in ("error", "warning")]


def found_kinds(report: dict[str, Any]) -> set[str]:
    kinds = set()
    for f in serious(report):
        kinds.add(f["kind"])
        kinds |= {r["kind"] for r in f.get("related", [])}
    return kinds


@dataclass(slots=True)
class Score:
    spec: Spec
    headline: str | None
    family: str | None
    headline_ok: bool
    family_ok: bool | None  # None: a healthy run (no root cause to name)
    origin_ok: bool | None  # None: no NaN origin to find
    onset_ok: bool | None
    layer_ok: bool | None  # None: no single layer is labelled
    missed: list[str]
    want: list[str]
    origin: dict[str, Any] | None
    layer: str | None = None


def score(o: Outcome) -> Score:
    spec, report = o.spec, o.report
    top = next(iter(serious(report)), None)
    kind = top["kind"] if top else None
    if spec.healthy:
        return Score(spec, kind, None, top is None, None, None, None, None, [], [], None)
    fault = FAULTS[spec.fault]
    headlines = set(fault.headline)
    if spec.fault.startswith("lr_") or spec.fault == "late_growth":
        pass
    want = set(fault.kinds) | (o.physical & {"nonfinite"})
    if "loss_blowup" in o.physical and "nonfinite" not in o.physical:
        want.add("loss_blowup")
    if "nonfinite" in o.physical and spec.fault in FAULTS and fault.family == "learning_rate":
        headlines.add("nonfinite")
    found = found_kinds(report)
    missed = sorted(k for k in want if k not in found)
    family = top.get("root_cause_family") if top else None
    onset_ok = None
    if top is not None and top.get("step") is not None:
        lo, hi = fault.onset
        if spec.fault in ("num_forward", "num_backward", "num_loss", "data_nan"):
            lo = hi = HAZARD_STEP + 3 * spec.seed
            hi += 1
        onset_ok = lo <= top["step"] < hi + ONSET_SLACK
    origin_ok = None
    origin = top.get("origin") if top else None
    hazard = hazard_of(spec)
    if hazard is not None and "nonfinite" in o.physical:
        phase, op = HAZARDS[hazard]
        if origin is None:
            origin_ok = False
        elif phase == "input":
            origin_ok = origin.get("phase") == "input"
        else:
            origin_ok = (
                origin.get("op") == op
                and origin.get("phase") == phase
                and str(origin.get("file", "")).endswith("accuracy.py")
                and origin.get("line") == HAZARD_LINE[hazard]
            )
    return Score(
        spec,
        kind,
        family,
        kind in headlines,
        family == fault.family,
        origin_ok,
        onset_ok,
        None
        if (accepted := layer_of(spec)) is None
        else top is not None and _layer_ok(top.get("layer"), accepted),
        missed,
        sorted(want),
        origin,
        top.get("layer") if top else None,
    )


def pct(hits: int, n: int) -> str:
    return f"{100 * hits / n:5.1f}% ({hits}/{n})" if n else "   n/a"


def table(
    scores: list[Score], skipped: list[Outcome], split: str, out: io.TextIOBase | Any
) -> dict[str, Any]:
    faulty = [s for s in scores if not s.spec.healthy]
    healthy = [s for s in scores if s.spec.healthy]
    origins = [s for s in faulty if s.origin_ok is not None]
    onsets = [s for s in faulty if s.onset_ok is not None]
    layers = [s for s in faulty if s.layer_ok is not None]
    per_kind: dict[str, list[bool]] = defaultdict(list)
    for s in faulty:
        for k in s.want:
            per_kind[k].append(k not in s.missed)
    summary = {
        "split": split,
        "runs": len(scores),
        "faulty": len(faulty),
        "healthy": len(healthy),
        "left_out": [o.spec.name for o in skipped],
        "headline": sum(s.headline_ok for s in faulty) / max(1, len(faulty)),
        "root_cause": sum(bool(s.family_ok) for s in faulty) / max(1, len(faulty)),
        "origin": sum(bool(s.origin_ok) for s in origins) / max(1, len(origins)),
        "onset": sum(bool(s.onset_ok) for s in onsets) / max(1, len(onsets)),
        "layer": sum(bool(s.layer_ok) for s in layers) / max(1, len(layers)),
        "false_alarms": sum(not s.headline_ok for s in healthy),
        "recall": {k: sum(v) / len(v) for k, v in sorted(per_kind.items())},
    }
    p = lambda *a: print(*a, file=out)  # noqa: E731
    p(f"\n## {split}: {len(scores)} runs ({len(faulty)} with a fault, {len(healthy)} healthy)")
    if skipped:
        p(f"left out, the fault did not take: {', '.join(o.spec.name for o in skipped)}")
    p("")
    p("| measure | held-out result |" if split == "held-out" else "| measure | result |")
    p("|---|---|")
    p(f"| headline kind right | {pct(sum(s.headline_ok for s in faulty), len(faulty))} |")
    p(f"| root-cause family right | {pct(sum(bool(s.family_ok) for s in faulty), len(faulty))} |")
    origin_hits = sum(bool(s.origin_ok) for s in origins)
    p(f"| origin op + line right (runs with a NaN/Inf) | {pct(origin_hits, len(origins))} |")
    onset_hits = sum(bool(s.onset_ok) for s in onsets)
    p(f"| onset step in the labelled range | {pct(onset_hits, len(onsets))} |")
    layer_hits = sum(bool(s.layer_ok) for s in layers)
    p(f"| layer right (runs whose label names one) | {pct(layer_hits, len(layers))} |")
    p(f"| healthy runs with a warning or error | {summary['false_alarms']} of {len(healthy)} |")
    for k, v in sorted(per_kind.items()):
        p(f"| recall `{k}` | {pct(sum(v), len(v))} |")
    # confusion: fault family (rows) x headline kind (columns)
    rows: dict[str, Counter[str]] = defaultdict(Counter)
    for s in scores:
        rows["healthy" if s.spec.healthy else s.spec.fault][s.headline or "healthy"] += 1
    cols = sorted({c for r in rows.values() for c in r})
    p("\nheadline by fault (rows: the fault; columns: gradoc's headline)\n")
    p("| fault | " + " | ".join(cols) + " |")
    p("|---|" + "---|" * len(cols))
    for name in [*FAULTS, "healthy"]:
        if name in rows:
            p(f"| {name} | " + " | ".join(str(rows[name][c] or "") for c in cols) + " |")
    fam: dict[str, Counter[str]] = defaultdict(Counter)
    for s in faulty:
        fam[FAULTS[s.spec.fault].family][s.family or "none"] += 1
    fcols = sorted({c for r in fam.values() for c in r})
    p("\nroot-cause family (rows: the label; columns: gradoc's)\n")
    p("| label | " + " | ".join(fcols) + " |")
    p("|---|" + "---|" * len(fcols))
    for name, r in sorted(fam.items()):
        p(f"| {name} | " + " | ".join(str(r[c] or "") for c in fcols) + " |")
    wrong = [
        s
        for s in scores
        if not s.headline_ok
        or s.family_ok is False
        or s.origin_ok is False
        or s.layer_ok is False
        or s.missed
    ]
    if wrong:
        p("\nmisses:")
        for s in wrong:
            what = []
            if not s.headline_ok:
                what.append(f"headline {s.headline}")
            if s.family_ok is False:
                what.append(f"family {s.family}")
            if s.origin_ok is False:
                o = s.origin or {}
                what.append(f"origin {o.get('phase')} {o.get('op')} line {o.get('line')}")
            if s.missed:
                what.append(f"missed {','.join(s.missed)}")
            if s.layer_ok is False:
                what.append(f"layer {s.layer}")
            p(f"  {s.spec.name}: {'; '.join(what)}")
    return summary


def run_all(specs: list[Spec], progress: bool = True) -> tuple[list[Score], list[Outcome]]:
    scores, skipped = [], []
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        for i, spec in enumerate(specs):
            with (
                contextlib.redirect_stderr(io.StringIO()),
                contextlib.redirect_stdout(io.StringIO()),
            ):
                o = train(spec, Path(tmp) / f"r{i}")
            if not o.took:
                skipped.append(o)
            else:
                scores.append(score(o))
            if progress:
                done = time.perf_counter() - t0
                eta = done / (i + 1) * (len(specs) - i - 1)
                print(
                    f"\r  {i + 1}/{len(specs)} runs, {done:.0f} s, ~{eta:.0f} s left   ",
                    end="",
                    file=sys.stderr,
                )
        if progress:
            print(file=sys.stderr)
    return scores, skipped


def quick() -> list[Spec]:
    """One run per fault family (on the first architecture it applies to, rotating) and
    two healthy ones: the CI slice."""
    specs = []
    for i, (name, fault) in enumerate(FAULTS.items()):
        archs = [a for a in ARCHS if a in fault.archs]
        specs.append(Spec(archs[i % len(archs)], name, 1, 48))
    specs += [
        Spec("mlp", "healthy:warmup_cosine", 1, 48),
        Spec("transformer", "healthy:dropout", 1, 48),
    ]
    return specs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--split", choices=[*SPLITS, "all"], default="held-out")
    ap.add_argument("--quick", action="store_true", help="one run per fault family")
    ap.add_argument("--only", help="ARCH[:FAULT] runs of the split, e.g. mlp:lr_adam")
    ap.add_argument("--json", type=Path, help="write the summary here")
    ap.add_argument(
        "--sample-every",
        type=int,
        metavar="N",
        help="weights, updates and activations every N steps from the start (a robustness "
        "check of the rules on sparse samples; default: gradoc's budget)",
    )
    ap.add_argument(
        "--grads-every",
        type=int,
        metavar="N",
        help="the gradients' norms every N steps from the start, the loss every step (the "
        "rules on a lean cadence's reads; default: every step until gradoc's budget says)",
    )
    ap.add_argument(
        "--long",
        type=int,
        nargs="?",
        const=10,
        metavar="K",
        help="the long split: 2,000-step runs, each fault striking at step 1,200, scored with "
        "the gradients read every step and on a lean cadence of every K (default 10)",
    )
    ap.add_argument("--real", nargs="*", metavar="CASE", help="the real programs (all, or CASEs)")
    ap.add_argument("--real-dir", type=Path, default=REAL, help="where the real programs are")
    args = ap.parse_args(argv)
    if args.real is not None:
        summary = real_programs(args.real_dir, args.real, sys.stdout)
        if args.json:
            args.json.write_text(json.dumps(summary, indent=1))
        return 0 if summary["suite_passed"] == summary["cases"] else 1
    torch.set_num_threads(1)
    global SAMPLE_EVERY
    if args.sample_every is not None:
        if args.sample_every < 1:
            ap.error("--sample-every must be >= 1")
        SAMPLE_EVERY = args.sample_every
    global GRADS
    if args.grads_every is not None:
        if args.grads_every < 1:
            ap.error("--grads-every must be >= 1")
        GRADS = gradoc.every(args.grads_every)
    if args.long is not None:
        if args.long < 2:
            ap.error("--long K must be >= 2 (the lean arm's cadence)")
        summary = long_split(args.long, args.only, sys.stdout)
        if args.json:
            args.json.write_text(json.dumps(summary, indent=1))
        return 0
    splits = list(SPLITS) if args.split == "all" else [args.split]
    summaries = []
    for split in splits:
        specs = quick() if args.quick else corpus(split)
        if args.only:
            specs = [s for s in specs if s.name.startswith(args.only)]
        scores, skipped = run_all(specs)
        label = "quick" if args.quick else split
        if SAMPLE_EVERY is not None:
            label += f", sampled every {SAMPLE_EVERY} steps"
        summaries.append(table(scores, skipped, label, sys.stdout))
        if args.quick:
            break
    if args.json:
        args.json.write_text(json.dumps(summaries, indent=1))
    return 0


# -- the long split (issue 47) ---------------------------------------------------------------
LONG_STEPS, LONG_AT, LONG_BAD = 2000, 1200, 1500
LONG_FAULTS = (
    "lr_sgd",
    "lr_momentum",
    "lr_adam",
    "late_growth",
    "num_forward",
    "num_backward",
    "num_loss",
    "data_nan",
    "bad_batch",
)
"""The faults that can strike a run after its cadence is chosen (step ~50) and its lean
reads began (step 200): a learning rate that jumps (a schedule, a resumed run given the wrong
one), one that keeps growing, a NaN born in the forward, the backward or the loss, a NaN in
the data, a mislabelled batch. The others (an initialisation, an architecture, fp16's range,
a missing mask) are there from the first step, where every step is read either way."""


def long_mode() -> None:
    """Move the faults late: 2,000 steps, the jump, the hazards and the growth at 1,200 (+ 3
    x seed for the hazards), the bad batch at 1,500."""
    global STEPS, HAZARD_STEP, BAD_BATCH_STEP, LATE_AT, LR_AT
    STEPS, HAZARD_STEP, BAD_BATCH_STEP = LONG_STEPS, LONG_AT, LONG_BAD
    LATE_AT = LR_AT = LONG_AT
    for name in ("lr_sgd", "lr_momentum", "lr_adam"):
        FAULTS[name] = dataclasses.replace(FAULTS[name], onset=(LONG_AT, LONG_AT + 40))
    FAULTS["late_growth"] = dataclasses.replace(FAULTS["late_growth"], onset=(LONG_AT, STEPS))
    FAULTS["bad_batch"] = dataclasses.replace(FAULTS["bad_batch"], onset=(LONG_BAD, LONG_BAD + 1))


def long_corpus() -> list[Spec]:
    """Seed 1 at width 48 (the held-out split's first seed): each late fault on every
    architecture it applies to, and one healthy recipe per architecture."""
    specs = [Spec(a, f, 1, 48) for f in LONG_FAULTS for a in ARCHS if a in FAULTS[f].archs]
    specs += [
        Spec(a, f"healthy:{RECIPES[(i + 3) % len(RECIPES)]}", 1, 48) for i, a in enumerate(ARCHS)
    ]
    return specs


def long_split(k: int, only: str | None, out: Any) -> dict[str, Any]:
    """Score the long split twice, the gradients read every step and every ``k`` steps from
    step 200 (``gradoc.lean(every=k)``), and compare the two run by run."""
    global GRADS, ONSET_SLACK
    long_mode()
    specs = [s for s in long_corpus() if not only or s.name.startswith(only)]
    arms: dict[str, tuple[list[Score], list[Outcome]]] = {}
    summaries = {}
    for arm, grads, slack in (
        ("every step", 1, 0),
        (f"lean, every {k}", gradoc.lean(every=k), k - 1),
    ):
        GRADS, ONSET_SLACK = grads, slack
        print(f"{arm}:", file=sys.stderr)
        arms[arm] = run_all(specs)
        summaries[arm] = table(*arms[arm], f"long, gradients {arm}", out)
    (every, _), (lean, _) = arms.values()
    by_name = {s.spec.name: s for s in every}
    pairs = [(by_name[s.spec.name], s) for s in lean if s.spec.name in by_name]
    faulty = [(a, b) for a, b in pairs if not a.spec.healthy]
    lost = [b.spec.name for a, b in faulty if a.headline_ok and not b.headline_ok]
    gained = [b.spec.name for a, b in faulty if b.headline_ok and not a.headline_ok]
    late = [b.spec.name for a, b in faulty if a.onset_ok and not b.onset_ok]
    same = sum(a.headline == b.headline for a, b in faulty)
    print(
        f"\n## every step against lean (every {k}), run by run ({len(faulty)} faulty runs)",
        file=out,
    )
    print(f"- same headline kind: {same} of {len(faulty)}", file=out)
    print(f"- detected every step, missed lean: {', '.join(lost) or 'none'}", file=out)
    print(f"- missed every step, detected lean: {', '.join(gained) or 'none'}", file=out)
    print(
        f"- onset in range every step, past {k - 1} steps late lean: {', '.join(late) or 'none'}",
        file=out,
    )
    return {"k": k, "arms": summaries, "lost": lost, "gained": gained, "late": late, "same": same}


REAL = Path(__file__).resolve().parents[2] / "shared" / "real-programs"


def real_programs(root: Path, names: list[str], out: Any) -> dict[str, Any]:
    """Run and score the real programs (see the module docstring)."""
    import os
    import shutil
    import subprocess
    import tempfile

    if not (root / "check.py").exists():
        raise SystemExit(f"no real-program suite at {root} (--real-dir)")
    cases = names or sorted(p.name for p in root.iterdir() if (p / "expect.json").exists())
    gradoc = shutil.which("gradoc") or str(Path(sys.executable).parent / "gradoc")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(cases, 1):
            print(f"[{i}/{len(cases)}] {case}", file=sys.stderr, flush=True)
            where = Path(tmp) / case
            env = {**os.environ, "PY": sys.executable, "GRADOC": gradoc, "OUT": str(where)}
            rc = subprocess.run(["bash", str(root / case / "run.sh")], env=env, capture_output=True)
            if rc.returncode == 77:
                results.append({"case": case, "skipped": True})
                continue
            check = subprocess.run(
                [sys.executable, str(root / "check.py"), str(root / case), str(where)],
                capture_output=True,
                text=True,
            )
            results.append(_score_real(root / case, where, check.returncode == 0, check.stdout))
    return _real_table(results, out)


def _score_real(case: Path, where: Path, passed: bool, verdict: str) -> dict[str, Any]:
    expect = json.loads((case / "expect.json").read_text())
    try:
        report = json.loads((where / "report.json").read_text())
    except (OSError, ValueError):
        report = {"findings": []}
    top = next(iter(serious(report)), None)
    kinds = expect.get("kind") or []
    kinds = [kinds] if isinstance(kinds, str) else kinds
    words = expect.get("root_cause_contains")
    return {
        "case": case.name,
        "healthy": bool(expect.get("healthy")),
        "suite": passed,
        "verdict": verdict.strip(),
        "found": bool(set(kinds) & found_kinds(report)),
        "headline": bool(top and top["kind"] in kinds),
        "root_cause": None
        if not words
        else bool(top and words.lower() in (top.get("root_cause") or "").lower()),
        "false_alarm": bool(expect.get("healthy") and top is not None),
        "said": top["kind"] if top else None,
    }


def _real_table(results: list[dict[str, Any]], out: Any) -> dict[str, Any]:
    ran = [r for r in results if not r.get("skipped")]
    bugs = [r for r in ran if not r["healthy"]]
    healthy = [r for r in ran if r["healthy"]]
    rooted = [r for r in bugs if r["root_cause"] is not None]
    print("\nreal programs (../shared/real-programs)", file=out)
    for r in ran:
        mark = "ok  " if r["suite"] else "FAIL"
        print(f"  {mark} {r['case']:40} {r['said'] or 'healthy'}", file=out)
    summary = {
        "cases": len(ran),
        "skipped": len(results) - len(ran),
        "suite_passed": sum(r["suite"] for r in ran),
        "found": f"{sum(r['found'] for r in bugs)}/{len(bugs)}",
        "headline": f"{sum(r['headline'] for r in bugs)}/{len(bugs)}",
        "root_cause": f"{sum(bool(r['root_cause']) for r in rooted)}/{len(rooted)}",
        "false_alarms": f"{sum(r['false_alarm'] for r in healthy)} of {len(healthy)}",
    }
    print(
        f"  suite {summary['suite_passed']}/{len(ran)}; bugs found {summary['found']}, headline "
        f"{summary['headline']}, root cause {summary['root_cause']}; false alarms "
        f"{summary['false_alarms']} healthy; skipped {summary['skipped']}",
        file=out,
    )
    return summary


if __name__ == "__main__":
    sys.exit(main())
