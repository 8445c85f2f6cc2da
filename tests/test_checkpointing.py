"""The checkpointing planner and apply_checkpointing: identical gradients, memory as
predicted, the command line."""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import gradoc
from gradoc.errors import GradocError
from gradoc.tools import find_blocks, remove_checkpointing
from tests.test_cli import gradoc_cli


class Tiny(nn.Module):
    def __init__(self, n: int = 6, d: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(100, d)
        layer = nn.TransformerEncoderLayer(d, 4, 2 * d, 0.2, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, n, enable_nested_tensor=False)
        self.head = nn.Linear(d, 3)

    def forward(self, t: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        out: torch.Tensor = self.head(
            self.encoder(self.embed(t), src_key_padding_mask=mask).mean(1)
        )
        return out


def _grads(model: nn.Module, seed: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)  # the same dropout masks for both models
    t = torch.randint(0, 100, (4, 20), generator=torch.Generator().manual_seed(1))
    mask = torch.zeros(4, 20, dtype=torch.bool)
    mask[0, 15:] = True
    model.zero_grad()
    F.cross_entropy(model(t, mask=mask), torch.tensor([0, 1, 2, 0])).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_find_blocks_takes_the_repeated_layers() -> None:
    name, blocks = find_blocks(Tiny())
    assert name == "encoder.layers" and len(blocks) == 6
    with pytest.raises(GradocError, match="no repeated blocks"):
        find_blocks(nn.Linear(2, 2))


@pytest.mark.parametrize("every", [1, 2, 4, 6])
def test_checkpointing_leaves_gradients_identical_with_dropout(every: int) -> None:
    torch.manual_seed(0)
    plain = Tiny()
    wrapped = Tiny()
    wrapped.load_state_dict(plain.state_dict())
    names = [n for n, _ in wrapped.named_parameters()]
    segments = gradoc.apply_checkpointing(wrapped, every=every)
    assert len(segments) == math.ceil(6 / every)
    assert [n for n, _ in wrapped.named_parameters()] == names  # names and state unchanged
    want, got = _grads(plain, 7), _grads(wrapped, 7)
    assert want.keys() == got.keys()
    for n in want:
        assert torch.equal(want[n], got[n]), n
    remove_checkpointing(wrapped)
    assert "forward" not in wrapped.encoder.layers[0].__dict__


def test_segments_need_chained_blocks() -> None:
    class Parallel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return sum(b(x) for b in self.blocks)  # type: ignore[return-value]

    model = Parallel()
    gradoc.apply_checkpointing(model, every=2)
    with pytest.raises(GradocError, match="one after another"):
        model(torch.randn(2, 4, requires_grad=True))
    gradoc.apply_checkpointing(model, every=1)  # per block works for any call pattern
    model(torch.randn(2, 4, requires_grad=True)).sum().backward()


def test_plan_memory_falls_as_predicted() -> None:
    torch.manual_seed(0)
    model = Tiny(n=8, d=64)
    t = torch.randint(0, 100, (8, 64))
    plan = gradoc.plan_checkpointing(model, t, repeats=2)
    rows = {r.setting: r for r in plan.rows}
    assert set(rows) == {"none", "every 1", "every 2", "every 3", "every 4", "every 8"}
    none = rows["none"].saved_bytes
    per_block = [b.saved_bytes for b in plan.blocks]
    assert all(b > 0 for b in per_block) and sum(per_block) < none
    for r in plan.rows:  # measured on the checkpointed copy vs predicted from the profile
        assert r.saved_bytes == pytest.approx(r.predicted_saved_bytes, rel=0.10)
    assert rows["every 1"].saved_bytes < 0.1 * none
    # more blocks per segment: fewer stored inputs, a larger recomputed segment at the peak
    assert rows["every 8"].saved_bytes < rows["every 1"].saved_bytes
    assert rows["every 8"].peak_bytes > rows["every 2"].peak_bytes
    best = plan.recommend(rows["every 2"].peak_bytes + 1)
    assert best is not None and best.peak_bytes <= rows["every 2"].peak_bytes + 1
    assert plan.recommend(1.0) is None
    assert all(p.grad is None for p in model.parameters())  # the model itself untouched
    assert "forward" not in model.encoder.layers[0].__dict__


def test_checkpoint_plan_command(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch, torch.nn as nn, torch.nn.functional as F
            layer = nn.TransformerEncoderLayer(32, 4, 64, 0.1, batch_first=True)
            model = nn.Sequential(nn.TransformerEncoder(layer, 4, enable_nested_tensor=False))
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for step in range(5):
                x = torch.randn(4, 16, 32)
                loss = model(x).pow(2).mean()
                opt.zero_grad(); loss.backward(); opt.step()
                if step == 1:
                    raise SystemExit("the planner should have stopped the script at step 0")
            """
        )
    )
    out = tmp_path / "plan"
    done = gradoc_cli("checkpoint-plan", "--budget", "1", "--out", str(out), str(script))
    assert done.returncode == 0, done.stderr
    data = json.loads((out / "checkpoint-plan.json").read_text())
    assert data["blocks_name"] == "0.layers" and len(data["rows"]) >= 4
    assert (out / "checkpoint-plan.png").stat().st_size > 1000
    page = (out / "checkpoint-plan.html").read_text()
    assert 'id="chart-checkpointing"' in page and "<svg" in page
    assert "recommended" in done.stdout and "every 1" in done.stdout
