"""The output logits' level read from the loss's graph (``collect.graph.output_logits``) and the
precursor finding built on it (``findings.output_logit_divergence``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import gradoc
from gradoc.collect.graph import attention
from gradoc.collect.graph.attention import LOOKS, AttentionReader, output_layer
from gradoc.collect.graph.output_logits import logits_dtype, output_calls, output_stats
from gradoc.detect.history import History, OutputLogits
from gradoc.findings import REGISTRY
from gradoc.findings.output_logit_divergence import spacing
from gradoc.store import Series
from tests.test_cli import gradoc_cli

V = 11


def _read(loss: torch.Tensor) -> list[torch.Tensor | None]:
    return [output_stats(ls, p) for ls, p in output_calls(loss.grad_fn)]


def _truth(logits: torch.Tensor) -> list[float]:
    z = logits.detach().float().reshape(-1, V)
    top, low = z.max(-1).values, z.min(-1).values
    return [float(torch.logsumexp(z, -1).mean()), float(top.mean()), float((top - low).mean())]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(
    "how", ["view", "bf16", "classes-second", "z-loss", "2-d", "log_softmax(dim=-1)"]
)
def test_log_z_is_recomputed_from_the_graph_as_the_logits_hold_it(bias: bool, how: str) -> None:
    torch.manual_seed(0)
    head = nn.Linear(8, V, bias=bias)
    with torch.no_grad():  # a level far from 0: a bias (or a weight) the rows share
        head.weight.mul_(5)
        if head.bias is not None:
            head.bias.sub_(30)
    h = torch.randn(4, 7, 8, requires_grad=True)
    targets = torch.zeros(4, 7, dtype=torch.long)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=how == "bf16"):
        logits = head(h if how != "2-d" else h[:, 0])
    if how == "classes-second":  # cross_entropy over (batch, classes, time)
        loss = F.cross_entropy(logits.transpose(1, 2), targets)
    elif how == "2-d":
        loss = F.cross_entropy(logits, targets[:, 0])
    elif how == "log_softmax(dim=-1)":  # the word language model's: dim saved as 2**64 - 1
        loss = F.nll_loss(F.log_softmax(logits, dim=-1).view(-1, V), targets.reshape(-1))
    else:
        loss = F.cross_entropy(logits.float().reshape(-1, V), targets.reshape(-1))
        if how == "z-loss":
            loss = loss + 1e-4 * torch.logsumexp(logits, -1).pow(2).mean()
    (read,) = _read(loss)
    assert read is not None
    assert read.tolist() == pytest.approx(_truth(logits), abs=0.02)
    (call,) = output_calls(loss.grad_fn)
    assert logits_dtype(call[1]) == ("bfloat16" if how == "bf16" else "float32")
    names = {id(p): f"lm_head.{n}" for n, p in head.named_parameters()}
    assert output_layer(call[1], names, 0) == "lm_head"


def test_a_product_with_a_weight_written_out_is_read_too() -> None:
    """``h @ W`` with ``W`` (features, classes): the weight's columns are its classes."""
    w = nn.Parameter(torch.randn(8, V) * 4)
    h = torch.randn(4, 7, 8, requires_grad=True)
    logits = h @ w
    (read,) = _read(F.cross_entropy(logits.view(-1, V), torch.zeros(28, dtype=torch.long)))
    assert read is not None and read.tolist() == pytest.approx(_truth(logits), abs=0.02)


def test_rows_that_do_not_line_up_and_a_temperature_are_not_read() -> None:
    head = nn.Linear(8, V)
    h = torch.randn(4, 7, 8)
    swapped = head(h).transpose(0, 1).reshape(-1, V)  # time-major rows: not the product's
    (read,) = _read(F.cross_entropy(swapped, torch.zeros(28, dtype=torch.long)))
    assert read is not None and all(math.isnan(v) for v in read.tolist())
    warm = head(h).reshape(-1, V) / 2.0  # the softmax is not over the product's logits
    assert _read(F.cross_entropy(warm, torch.zeros(28, dtype=torch.long))) == []
    probs = head(h).softmax(-1)  # no log-softmax at all
    assert _read(probs.sum()) == []


def test_a_model_without_attention_is_still_read_for_its_output(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, reader = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, V)), AttentionReader()
    names = {id(p): n for n, p in model.named_parameters()}
    walks: list[object] = []
    walk = attention.attention_calls
    monkeypatch.setattr(attention, "attention_calls", lambda root: walks.append(root) or walk(root))
    for step in range(30):
        if reader.due(step):
            loss = F.cross_entropy(model(torch.randn(4, 8)), torch.zeros(4, dtype=torch.long))
            assert reader.read(loss.grad_fn, names) is None  # no attention
            assert reader.output is not None
    assert reader.outputs == ["2"] and reader.dtypes == ["float32"]
    assert reader.reads == 30 and reader.looked == 21  # the first 20, then step 20 of 10
    assert len(walks) == LOOKS  # the graph is walked for attention no more once none is found


def _history(log_z: list[float], dtype: str = "bfloat16") -> History:
    steps = [10 * i for i in range(len(log_z))]
    z = Series(steps, log_z)
    top = Series(steps, [v - 1.0 for v in log_z])
    return History(output_logits=[OutputLogits("lm_head", dtype, z, top, Series(steps, [9.0] * 6))])


@pytest.mark.parametrize(
    ("log_z", "dtype", "step"),
    [
        ([8.5, 8.0, 7.5, -10.0, -70.0, -80.0], "bfloat16", 40),
        ([8.5, 8.0, 7.5, -33.0, -40.0, -60.0], "bfloat16", None),  # a quarter nat: 0.003
        ([8.5, 8.0, 7.5, -10.0, -70.0, -80.0], "float32", None),  # float32 resolves it
        ([8.5, 8.0, 7.5, -10.0, -70.0, -80.0], "float16", None),  # 1/16 nat at 70
        ([8.5, 8.0, 7.5, -10.0, -70.0, -5.0], "bfloat16", None),  # one read
        ([-70.0, -71.0, -72.0, -74.0, -75.0, -76.0], "bfloat16", None),  # far from the start
        ([8.5, 8.0, 7.5, 600.0, 700.0, 800.0], "float16", 30),
    ],
)
def test_the_rule_needs_a_drift_to_where_the_dtype_rounds_to_half_a_nat(
    log_z: list[float], dtype: str, step: int | None
) -> None:
    found = REGISTRY["output_logit_divergence"].check(_history(log_z, dtype))
    assert [f.step for f in found] == ([step] if step is not None else [])
    if found:
        assert found[0].layer == "lm_head" and dtype in found[0].summary


def test_spacing_is_the_dtype_s() -> None:
    assert spacing("bfloat16", -33.0) == 0.25 and spacing("bfloat16", 8.5) == 2**-4
    assert spacing("float16", 300.0) == 0.25 and spacing("float32", 1e5) == 2**-7


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed, self.lm_head = nn.Embedding(V, 16), nn.Linear(16, V)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.lm_head(torch.tanh(self.embed(x)))


def test_a_drifting_bf16_level_is_found_with_its_series_in_the_report(tmp_path: Path) -> None:
    """The drift the proxy shows over thousands of steps, forced here: the program moves its
    output bias down two nats a step (a softmax cannot see it, so the loss trains on)."""
    torch.manual_seed(0)
    model = TinyLM()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    with gradoc.watch(model, opt, out=tmp_path / "run") as done:
        for _ in range(80):
            x = torch.randint(0, V, (8, 12))
            loss = F.cross_entropy(model(x).float().reshape(-1, V), x.roll(1, 1).reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                model.lm_head.bias.sub_(2.0)
    report = json.loads((done.dir / "report.json").read_text())
    (series,) = report["run"]["output_logits"]
    assert series["layer"] == "lm_head" and series["dtype"] == "bfloat16"
    assert series["log_z"][0] == pytest.approx(math.log(V), abs=0.7)
    assert series["log_z"][-1] < -120
    assert "output logits on the first 20 backward() calls" in report["run"]["sampling"]
    (found,) = [f for f in report["findings"] if f["kind"] == "output_logit_divergence"]
    assert found["layer"] == "lm_head" and found["step"] < 60
    assert any(fix["action"].startswith("add a z-loss") for fix in found["fixes"])
    assert "chart-output-logits" in (done.dir / "report.html").read_text()
    shown = gradoc_cli("report", str(done.dir))
    assert shown.returncode == 0, shown.stderr
    assert "output logits of lm_head (bfloat16)" in shown.stdout and "log Z" in shown.stdout


def test_a_healthy_float32_classifier_gives_no_warning(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, V))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    with gradoc.watch(model, opt, out=tmp_path / "run") as done:
        for _ in range(60):
            x = torch.randn(16, 8)
            loss = F.cross_entropy(model(x), x[:, 0].gt(0).long())
            opt.zero_grad()
            loss.backward()
            opt.step()
    report = json.loads((done.dir / "report.json").read_text())
    assert report["status"] == "healthy", [f["summary"] for f in report["findings"]]
    (series,) = report["run"]["output_logits"]
    assert series["dtype"] == "float32" and abs(series["log_z"][-1]) < 10
