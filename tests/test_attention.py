"""Attention's sharpness read from the loss's graph (``collect.graph.attention``) and the precursor
finding built on it (``findings.attention_logit_growth``)."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from gradoc.collect.graph import attention
from gradoc.collect.graph.attention import FIRST, LOOKS, AttentionReader, attention_calls
from gradoc.detect.history import Attention, History
from gradoc.findings import REGISTRY
from gradoc.store import Series
from tests.test_cli import gradoc_cli

ROOT = Path(__file__).resolve().parents[1]
LM = ROOT / "benchmarks" / "precursors" / "lm.py"


class Attn(nn.Module):
    """Causal self-attention, written out (``softmax(q @ k^T)``) or through SDPA."""

    def __init__(self, sdpa: bool, mask: str = "causal") -> None:
        super().__init__()
        self.c_attn, self.sdpa, self.mask = nn.Linear(16, 48), sdpa, mask

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.c_attn(x).split(16, -1)
        q, k, v = (z.view(b, t, 4, 4).transpose(1, 2) for z in (q, k, v))
        keep = torch.ones(t, t, dtype=torch.bool).tril()
        if self.mask == "float":
            keep[:, 0] = False
            keep[0, 0] = True  # every row keeps a key
        if self.sdpa:
            if self.mask == "causal":
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                bias = torch.zeros(t, t).masked_fill(~keep, float("-inf"))
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        else:
            a = (q @ k.transpose(-2, -1)) / math.sqrt(4)
            y = a.masked_fill(~keep, float("-inf")).softmax(-1) @ v
        return y.transpose(1, 2).reshape(b, t, 16)


@pytest.mark.parametrize("mask", ["causal", "float"])
def test_sdpa_and_a_written_out_softmax_read_the_same_gap_and_entropy(mask: str) -> None:
    torch.manual_seed(1)
    written, fused = Attn(False, mask), Attn(True, mask)
    fused.load_state_dict(written.state_dict())
    x = torch.randn(2, 8, 16) * 3
    (a,) = AttentionReader().read(written(x).sum().grad_fn, {}) or []
    (b,) = AttentionReader().read(fused(x).sum().grad_fn, {}) or []
    assert a.shape == (2, 4)  # per head: the largest logit gap, the entropy share
    assert torch.allclose(a, b, atol=1e-4), (a, b)
    assert (a[0] > 0).all() and ((a[1] > 0) & (a[1] <= 1)).all()


def test_each_call_is_named_by_its_layer_in_forward_order() -> None:
    x = torch.randn(2, 8, 16)
    model = nn.Sequential(Attn(True), Attn(False))
    names = {id(p): n for n, p in model.named_parameters()}
    reader = AttentionReader()
    assert len(reader.read(model(x).pow(2).mean().grad_fn, names) or []) == 2
    assert reader.layers == ["0", "1"]  # 0.c_attn.weight's parent

    mha = nn.MultiheadAttention(16, 4, batch_first=True)  # its own in_proj_weight
    names = {id(p): f"blocks.3.attn.{n}" for n, p in mha.named_parameters()}
    for weights in (True, False):  # an explicit softmax, then SDPA
        reader = AttentionReader()
        out, _ = mha(x, x, x, need_weights=weights)
        assert reader.read(out.sum().grad_fn, names) is not None
        assert reader.layers == ["blocks.3.attn"]

    encoder = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(16, 4, batch_first=True, norm_first=True),
        2,
        enable_nested_tensor=False,
    )
    names = {id(p): n for n, p in encoder.named_parameters()}
    reader = AttentionReader()
    assert reader.read(encoder(x).sum().grad_fn, names) is not None
    assert reader.layers == ["layers.0.self_attn", "layers.1.self_attn"]


def test_a_softmax_over_the_vocabulary_is_not_attention() -> None:
    """A language model's output softmax is 3-d as attention is, but over a layer's product
    with its weight (an ``mm``), not a product of two activations (a ``bmm``)."""
    head = nn.Linear(16, 50)
    probs = F.softmax(head(torch.randn(2, 8, 16)), -1)
    assert attention_calls(probs.sum().grad_fn) == []


def test_reads_come_on_the_first_steps_then_one_in_ten_and_stop_where_there_is_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = Attn(True)

    def reads(reader: AttentionReader) -> list[int]:
        batches = (model(torch.randn(1, 4, 16)).sum().grad_fn for _ in range(60))
        return [s for s, g in enumerate(batches) if reader.due(s) and reader.read(g, {})]

    monkeypatch.setattr(attention, "BUDGET_FLOOR_S", 1.0)  # any read is within it
    assert reads(AttentionReader()) == [*range(FIRST), 20, 30, 40, 50]
    monkeypatch.setattr(attention, "BUDGET_FLOOR_S", 1e-12)  # no read is: spaced out
    monkeypatch.setattr(attention, "BUDGET_SHARE", 1e-9)
    reader = AttentionReader()
    assert reads(reader)[FIRST:] == [] and reader.every > 100
    assert reader.said == f"the first {FIRST} backward() calls, then 1 in {reader.every}"
    mlp, reader = nn.Linear(16, 1), AttentionReader()
    for s in range(40):
        if reader.due(s):
            reader.read(mlp(torch.randn(2, 16)).sum().grad_fn, {})
    assert reader.looked == LOOKS  # no attention: looked at no more


def _history(gaps: list[float], shares: list[float]) -> History:
    steps = [10 * i for i in range(len(gaps))]
    heads = [[(g, e), (g / 2, min(1.0, 4 * e))] for g, e in zip(gaps, shares)]
    return History(
        attention=[Attention("h.0.attn", Series(steps, gaps), Series(steps, shares), heads)]
    )


@pytest.mark.parametrize(
    ("gaps", "shares", "step"),
    [
        ([2, 2, 3, 5, 80, 400, 900], [0.9, 0.9, 0.8, 0.7, 0.05, 0.01, 0.0], 40),
        ([2, 2, 3, 5, 80, 4, 900], [0.9, 0.9, 0.8, 0.7, 0.05, 0.8, 0.0], None),  # one read
        ([2, 2, 3, 5, 80, 400, 900], [0.9, 0.9, 0.8, 0.7, 0.3, 0.3, 0.3], None),  # diffuse
        ([60, 60, 60, 70, 80, 90, 100], [0.05] * 7, None),  # sharp from the start
    ],
)
def test_the_rule_needs_a_one_hot_softmax_grown_tenfold_at_two_reads(
    gaps: list[float], shares: list[float], step: int | None
) -> None:
    found = REGISTRY["attention_logit_growth"].check(_history(gaps, shares))
    assert [f.step for f in found] == ([step] if step is not None else [])
    if found:
        assert found[0].layer == "h.0.attn" and "head 0" in found[0].summary


def test_the_precursor_warns_ahead_of_the_blowup_and_heads_its_story(tmp_path: Path) -> None:
    """``benchmarks/precursors/lm.py`` at lr 3.0: the first layer's attention goes one-hot
    tens of steps before the loss blows up (the sweep is in docs/benchmarks.md)."""
    out = tmp_path / "run"
    done = gradoc_cli(
        "run", "--out", str(out), "--json", str(tmp_path / "r.json"), str(LM),
        "--lr", "3.0", "--steps", "90",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    (head, *_) = report["findings"]
    assert head["kind"] == "attention_logit_growth" and head["layer"] == "blocks.0"
    blowup = next(r for r in head["related"] if r["kind"] == "loss_blowup")
    assert blowup["step"] - head["step"] >= 0.2 * blowup["step"]
    assert any(e["signal"].startswith("lead over the loss_blowup") for e in head["evidence"])
    db = sqlite3.connect(out / "run.db")
    (said,) = db.execute("select value from meta where key='attention'").fetchone()
    layers = json.loads(said)
    assert layers["layers"] == ["blocks.0", "blocks.1"]
    series = {a["layer"]: a for a in report["run"]["attention"]}  # the precursors' series
    assert list(series) == ["blocks.0", "blocks.1"]
    gaps = dict(zip(series["blocks.0"]["steps"], series["blocks.0"]["logit_gap"]))
    assert gaps[head["step"]] >= 50 and gaps[0] < 10
    html = (out / "report.html").read_text()
    assert "chart-attention-gap" in html and "chart-attention-entropy" in html
    assert "attn gap" in done.stderr  # the terminal shows the layer's series


def test_qk_layernorm_at_a_rate_that_trains_gives_no_warning(tmp_path: Path) -> None:
    done = gradoc_cli(
        "run", "--out", str(tmp_path / "run"), "--json", str(tmp_path / "r.json"), str(LM),
        "--lr", "0.03", "--steps", "120", "--qk-norm", "--z-loss", "1e-4",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["status"] == "healthy", [f["summary"] for f in report["findings"]]
    db = sqlite3.connect(tmp_path / "run" / "run.db")
    (reads,) = db.execute("select count(*) from attention where site = 0").fetchone()
    assert reads == FIRST + 10  # steps 0-19, then 20, 30, ... 110


def test_the_memory_efficient_kernels_bias_is_read_as_its_mask() -> None:
    """CUDA's memory-efficient attention saves its mask as ``attn_bias`` (no GPU here: a node
    holding what that kernel's saves)."""
    from types import SimpleNamespace

    from gradoc.collect.graph.attention import sdpa_stats

    torch.manual_seed(0)
    q, k = torch.randn(1, 2, 6, 4), torch.randn(1, 2, 6, 4)
    bias = torch.zeros(6, 6).masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), -math.inf)
    saved = {"_saved_query": q, "_saved_key": k, "_saved_is_causal": False, "_saved_scale": None}
    as_bias = sdpa_stats(SimpleNamespace(**saved, _saved_attn_bias=bias))
    causal = sdpa_stats(SimpleNamespace(**{**saved, "_saved_is_causal": True}))
    assert as_bias is not None and causal is not None
    assert torch.allclose(as_bias, causal, atol=1e-5)


def test_the_cadence_is_chosen_once_from_the_median_early_read() -> None:
    """One preempted read (5 ms among 0.5 ms ones, on 8 ms steps) changes nothing: the
    median read needs 1 in 3, so 1 in 10; a model whose reads cost 3 ms on 8 ms steps is
    read 1 in 20 (0.15 ms a step: within 0.24 ms)."""

    def chosen(costs: list[float]) -> int:
        reader = AttentionReader()
        for k, cost in enumerate(costs):
            reader._time(k, 0.008 * k, cost)
        reader._time(FIRST + 5, 1.0, 1.0)  # later timing is not read
        return reader.every

    assert chosen([0.0005] * 10 + [0.005] + [0.0005] * (FIRST - 11)) == 10
    assert chosen([0.003] * FIRST) == 20
