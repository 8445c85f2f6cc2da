"""`gradoc diff`: two runs that differ by one module."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

import gradoc
from gradoc.compare import diff_runs
from tests.test_cli import gradoc_cli


class Scale(nn.Module):
    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor


def _run(out: Path, factor: float, seed: int) -> Path:
    """The same MLP and data stream; the 'new version' multiplies in `scale` by factor."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), Scale(factor), nn.Tanh(), nn.Linear(64, 4)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradoc.watch(model, opt, out=out, activations=1) as run:
        for step in range(40):
            g = torch.Generator().manual_seed(seed * 1000 + step)
            x = torch.randn(32, 16, generator=g)
            loss = F.cross_entropy(model(x), x[:, :4].argmax(1))
            opt.zero_grad()
            loss.backward()
            opt.step()
    return run.dir


def test_diff_finds_the_changed_module(tmp_path: Path) -> None:
    before = _run(tmp_path / "a", 1.0, seed=1)
    after = _run(tmp_path / "b", 1000.0, seed=2)  # other batches: run-to-run noise as well
    out = tmp_path / "diff.json"
    done = gradoc_cli(
        "diff", str(before), str(after), "--json", str(out), "--html", str(tmp_path / "d.html")
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    parted = result["parted"]
    assert (parted["layer"], parted["step"], parted["statistic"]) == ("3", 0, "output std")
    assert parted["ratio"] > 100
    assert "after the change, 3's output std is" in done.stdout and "from step 0" in done.stdout
    page = (tmp_path / "d.html").read_text()
    assert 'id="chart-loss-overlay"' in page and "<svg" in page


def test_runs_that_differ_only_by_noise_do_not_part(tmp_path: Path) -> None:
    result = diff_runs(_run(tmp_path / "a", 1.0, 1), _run(tmp_path / "b", 1.0, 2))
    assert result.parted is None and "no layer differs" in result.explanation
