"""Small models and loops shared by the tests."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    """An MLP with a frozen layer, an unused layer and a sigmoid, to cover the edge cases."""

    def __init__(self) -> None:
        super().__init__()
        self.frozen = nn.Linear(6, 6)
        self.frozen.requires_grad_(False)
        self.fc1 = nn.Linear(6, 16)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(16, 8)
        self.gate = nn.Sigmoid()
        self.head = nn.Linear(8, 1)
        self.unused = nn.Linear(4, 4)  # never called: its grads stay None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.fc1(self.frozen(x)))
        out: torch.Tensor = self.head(self.gate(self.fc2(h)))
        return out


def make(lr_groups: bool = True) -> tuple[Net, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = Net()
    if lr_groups:
        opt = torch.optim.AdamW(
            [
                {"params": [*model.fc1.parameters(), *model.frozen.parameters()], "lr": 1e-2},
                {
                    "params": [
                        *model.fc2.parameters(),
                        *model.head.parameters(),
                        *model.unused.parameters(),
                    ],
                    "lr": 3e-3,
                },
            ]
        )
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return model, opt


def batch(step: int, micro: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + micro)
    x = torch.randn(12, 6, generator=g)
    return x, x.sum(1, keepdim=True).tanh()


def train(
    model: nn.Module, opt: torch.optim.Optimizer, steps: int, accum: int = 1
) -> list[torch.Tensor]:
    losses = []
    for step in range(steps):
        opt.zero_grad()
        for micro in range(accum):
            x, y = batch(step, micro)
            loss = F.mse_loss(model(x), y) / accum
            loss.backward()
            losses.append(loss.detach())
        opt.step()
    return losses


def one_step(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    step: int,
    scale: float = 1.0,
    after_backward: Callable[[], object] | None = None,
) -> float:
    """One plain training step on batch(step); ``after_backward`` may tamper with the grads."""
    x, y = batch(step)
    opt.zero_grad()
    loss = scale * F.mse_loss(model(x), y)
    loss.backward()
    if after_backward is not None:
        after_backward()
    opt.step()
    return loss.item()


def tiny_bert_config(**extra: object) -> object:
    """A 2-layer BERT config (transformers, no download) for the HF tests."""
    import transformers

    return transformers.BertConfig(
        vocab_size=50,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        **extra,
    )


def torchrun(*args: str, nproc: int = 2) -> subprocess.CompletedProcess[str]:
    """``torchrun --standalone --nproc_per_node N ARGS`` from the repository root; must pass."""
    root = Path(__file__).resolve().parent.parent
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node"]
    done = subprocess.run(
        [*cmd, str(nproc), *args], capture_output=True, text=True, timeout=300, cwd=root
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done
