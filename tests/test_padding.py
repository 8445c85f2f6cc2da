"""The padding audit, length monitoring, the bucketing samplers and the numerics harness."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import gradoc
from gradoc.data import LengthBucketSampler, TokenBudgetBatchSampler
from gradoc.demo.nan_posenc import LengthNormalisedEncoding
from gradoc.testing import assert_finite, check_numerics
from tests.models import tiny_bert_config
from tests.test_cli import gradoc_cli

B, T, V, D = 4, 12, 50, 32


@pytest.fixture
def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    tokens = torch.randint(1, V, (B, T))
    lengths = torch.tensor([12, 7, 3, 1])
    pads = torch.arange(T)[None] >= lengths[:, None]
    tokens[pads] = 0
    return tokens, lengths, pads


class Encoder(nn.Module):
    def __init__(self, masked: bool) -> None:
        super().__init__()
        self.masked = masked
        self.embed = nn.Embedding(V, D, padding_idx=0)
        layer = nn.TransformerEncoderLayer(D, 4, 64, 0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(D, 3)

    def forward(
        self, t: torch.Tensor, key_padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        mask = key_padding_mask if self.masked else None
        out: torch.Tensor = self.head(self.encoder(self.embed(t), src_key_padding_mask=mask))
        return out


class MeanPool(nn.Module):
    def __init__(self, masked: bool) -> None:
        super().__init__()
        self.masked = masked

    def forward(self, h: torch.Tensor, pads: torch.Tensor) -> torch.Tensor:
        if self.masked:
            keep = (~pads)[..., None].float()
            return (h * keep).sum(1) / keep.sum(1)
        return h.mean(1)


class Pooled(nn.Module):
    def __init__(self, masked: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.proj = nn.Linear(D, D)
        self.pool = MeanPool(masked)
        self.head = nn.Linear(D, 2)

    def forward(self, t: torch.Tensor, pads: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.pool(torch.relu(self.proj(self.embed(t))), pads))
        return out


class Recurrent(nn.Module):
    def __init__(self, packed: bool) -> None:
        super().__init__()
        self.packed = packed
        self.embed = nn.Embedding(V, D)
        self.rnn = nn.GRU(D, D, batch_first=True)
        self.head = nn.Linear(D, 2)

    def forward(self, t: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        e = self.embed(t)
        if self.packed:
            e = nn.utils.rnn.pack_padded_sequence(
                e, lengths, batch_first=True, enforce_sorted=False
            )
        _, h = self.rnn(e)
        out: torch.Tensor = self.head(h[-1])
        return out


class HandAttention(nn.Module):
    """Single-head attention written by hand, with an optional additive mask."""

    def __init__(self, masked: bool) -> None:
        super().__init__()
        self.masked = masked
        self.embed = nn.Embedding(V, D)
        self.qkv = nn.Linear(D, 3 * D)
        self.out = nn.Linear(D, 2)

    def forward(self, t: torch.Tensor, pads: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(self.embed(t)).chunk(3, -1)
        scores = q @ k.transpose(1, 2) / D**0.5
        if self.masked:
            scores = scores.masked_fill(pads[:, None, :], float("-inf"))
        out: torch.Tensor = self.out(scores.softmax(-1) @ v)
        return out


class SeqBatchNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.norm = nn.BatchNorm1d(D)  # over (batch x time): pads enter the statistics
        self.head = nn.Linear(D, 2)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.embed(t).transpose(1, 2)).transpose(1, 2)
        out: torch.Tensor = self.head(h)
        return out


def leaks(findings: list[gradoc.detect.Finding]) -> list[str | None]:
    return [f.layer for f in findings if f.kind == "padding_leak"]


def test_audit_finds_each_leak_in_its_module_and_passes_the_masked_versions(batch) -> None:  # type: ignore[no-untyped-def]
    tokens, lengths, pads = batch
    kpm = {"key_padding_mask": pads}
    assert leaks(gradoc.audit_padding(Encoder(False), tokens, pad_mask=pads, model_kwargs=kpm)) == [
        "encoder.layers.0.self_attn"
    ]
    assert leaks(gradoc.audit_padding(Encoder(True), tokens, pad_mask=pads, model_kwargs=kpm)) == []
    assert leaks(gradoc.audit_padding(Pooled(False), (tokens, pads), pad_mask=pads)) == ["pool"]
    assert leaks(gradoc.audit_padding(Pooled(True), (tokens, pads), pad_mask=pads)) == []
    assert leaks(gradoc.audit_padding(Recurrent(False), (tokens, lengths), pad_mask=pads)) == [
        "rnn"
    ]
    assert leaks(gradoc.audit_padding(Recurrent(True), (tokens, lengths), pad_mask=pads)) == []
    assert leaks(gradoc.audit_padding(HandAttention(False), (tokens, pads), pad_mask=pads)) == [""]
    assert leaks(gradoc.audit_padding(HandAttention(True), (tokens, pads), pad_mask=pads)) == []
    bn = SeqBatchNorm().train()
    assert leaks(gradoc.audit_padding(bn, tokens, pad_id=0)) == ["norm"]


def test_audit_with_a_hugging_face_model_built_from_a_config(batch) -> None:  # type: ignore[no-untyped-def]
    transformers = pytest.importorskip("transformers")
    tokens, _, pads = batch
    config = tiny_bert_config(pad_token_id=0)
    model = transformers.BertModel(config)
    masked = gradoc.audit_padding(model, tokens, attention_mask=(~pads).long())
    assert leaks(masked) == []
    unmasked = leaks(gradoc.audit_padding(model, tokens, pad_id=0))
    assert unmasked and "attention" in str(unmasked[0])


def test_loss_that_counts_pads_is_flagged(batch) -> None:  # type: ignore[no-untyped-def]
    tokens, _, pads = batch
    model = Encoder(True)
    targets = torch.randint(0, 3, (B, T))

    def loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(out.reshape(-1, 3), y.reshape(-1))

    kinds = lambda f: [x.kind for x in f]  # noqa: E731
    kw = {"key_padding_mask": pads}
    found = gradoc.audit_padding(
        model, tokens, pad_mask=pads, model_kwargs=kw, loss_fn=loss, targets=targets
    )
    assert "loss_includes_padding" in kinds(found)
    ignored = targets.masked_fill(pads, -100)
    clean = gradoc.audit_padding(
        model, tokens, pad_mask=pads, model_kwargs=kw, loss_fn=loss, targets=ignored
    )
    assert "loss_includes_padding" not in kinds(clean)
    waste = next(f for f in clean if f.kind == "padding_waste")
    assert waste.evidence[0].value == pytest.approx(float(pads.float().mean()))


def test_run_check_padding_and_length_monitoring(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch, torch.nn as nn, torch.nn.functional as F
            torch.manual_seed(0)
            class Enc(nn.Module):
                def __init__(s):
                    super().__init__()
                    s.embed = nn.Embedding(50, 32, padding_idx=0)
                    layer = nn.TransformerEncoderLayer(32, 4, 64, 0.1, batch_first=True)
                    s.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
                    s.head = nn.Linear(32, 2)
                def forward(s, t, src_key_padding_mask=None):
                    return s.head(s.encoder(s.embed(t)).mean(1))  # the mask is never used
            m = Enc(); opt = torch.optim.Adam(m.parameters(), 1e-3)
            for step in range(30):
                lengths = torch.randint(6, 16, (8,))
                if step == 25:
                    lengths[0] = 1  # one very short sequence
                t = torch.randint(1, 50, (8, 16))
                pads = torch.arange(16) >= lengths[:, None]
                t[pads] = 0
                loss = F.cross_entropy(m(t, src_key_padding_mask=pads), torch.randint(0, 2, (8,)))
                opt.zero_grad(); loss.backward(); opt.step()
            """
        )
    )
    done = gradoc_cli("run", "--check", "padding", "--out", str(tmp_path / "r"), str(script))
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    by_kind = {f["kind"]: f for f in report["findings"]}
    assert by_kind["padding_leak"]["layer"] == "encoder.layers.0.self_attn"
    assert by_kind["length_anomaly"]["step"] == 25
    log = gradoc.open_run(tmp_path / "r")
    assert (
        log.meta["lengths"]["source"] == "src_key_padding_mask" and log.meta["lengths"]["min"] == 1
    )


def test_demo_nan_is_linked_to_its_length_anomaly(tmp_path: Path) -> None:
    from gradoc.demo import nan_posenc

    nan_posenc.run(tmp_path / "d", epochs=1, n_train=1600)
    report = json.loads((tmp_path / "d" / "report.json").read_text())
    story = next(f for f in report["findings"] if f["kind"] == "nonfinite")
    related = [r for r in story["related"] if r["kind"] == "length_anomaly"]
    assert related and related[0]["step"] == story["step"]
    assert any("unusual lengths" in s for s in story["hypotheses"][0]["support"])


# -- samplers ---------------------------------------------------------------------------------
LENGTHS = (
    torch.exp(torch.randn(1000, generator=torch.Generator().manual_seed(0)) * 0.8 + 2.6)
    .long()
    .clamp(1, 128)
)


@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: LengthBucketSampler(LENGTHS, 16, **kw),
        lambda **kw: TokenBudgetBatchSampler(LENGTHS, 512, **kw),
    ],
    ids=["bucket", "tokens"],
)
def test_samplers_cover_every_sample_once_deterministically_and_shard(make) -> None:  # type: ignore[no-untyped-def]
    one = make(seed=3)
    batches = list(one)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(LENGTHS)))  # each sample exactly once per epoch
    assert batches == list(make(seed=3))  # deterministic per seed and epoch
    one.set_epoch(1)
    assert list(one) != batches  # reshuffled by epoch
    shards = [list(make(seed=3, num_replicas=3, rank=r)) for r in range(3)]
    assert len({len(s) for s in shards}) == 1  # same number of batches on every rank
    covered = [i for s in shards for b in s for i in b]
    assert set(covered) == set(range(len(LENGTHS)))
    assert all(s1 != s2 for k, s1 in enumerate(shards) for s2 in shards[k + 1 :])
    dropped = [list(make(seed=3, num_replicas=3, rank=r, drop_last=True)) for r in range(3)]
    ids = [i for s in dropped for b in s for i in b]
    assert len(ids) == len(set(ids))  # with drop_last nothing repeats


def test_bucketing_lowers_padding_and_the_budget_holds() -> None:
    def padding(batches: list[list[int]]) -> float:
        real = sum(int(LENGTHS[b].sum()) for b in batches)
        padded = sum(int(LENGTHS[b].max()) * len(b) for b in batches)
        return 1 - real / padded

    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(len(LENGTHS), generator=g).tolist()
    random = [perm[i : i + 16] for i in range(0, len(perm), 16)]
    assert padding(list(LengthBucketSampler(LENGTHS, 16))) < 0.5 * padding(random)
    budget = list(TokenBudgetBatchSampler(LENGTHS, 512))
    assert all(int(LENGTHS[b].max()) * len(b) <= 512 for b in budget)
    with pytest.raises(ValueError, match="below the longest"):
        TokenBudgetBatchSampler(LENGTHS, 8)


# -- the numerics harness ------------------------------------------------------------------------
class NormNoEps(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True)  # BUG: no epsilon


class NormEps(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-5)


def test_harness_finds_the_seeded_bugs_and_passes_the_fixes() -> None:
    x, lengths = torch.randn(2, 16, 64), torch.tensor([16, 5])
    problems = check_numerics(LengthNormalisedEncoding(64), (x, lengths))
    assert [p.variant for p in problems] == ["sequence length 1"]
    origin = problems[0].origin
    assert origin is not None and origin.op == "aten.div.Tensor"
    assert origin.file is not None and origin.file.endswith("nan_posenc.py")
    assert origin.code is not None and "pos / span" in origin.code
    assert check_numerics(LengthNormalisedEncoding(64, fixed=True), (x, lengths)) == []
    norm = check_numerics(NormNoEps(), x)
    assert {p.variant for p in norm} == {"zeros", "constant rows"}
    assert norm[0].origin is not None and norm[0].origin.file == __file__
    assert check_numerics(NormEps(), x) == []
    with pytest.raises(
        AssertionError, match=r"constant rows.*aten.div.Tensor.*test_padding.py:\d+"
    ):
        assert_finite(NormNoEps(), x)
    assert_finite(lambda t: torch.nn.functional.layer_norm(t, (64,)), x)  # a function works too


def test_pytest_plugin_gives_the_fixture(tmp_path: Path) -> None:
    (tmp_path / "test_model.py").write_text(
        textwrap.dedent(
            """
            import torch

            def test_norm(assert_finite):
                assert_finite(lambda x: x / x.std(-1, keepdim=True), torch.randn(2, 8, 4))
            """
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout  # the fixture exists, and the check fails
    assert "constant rows" in done.stdout and "fixture 'assert_finite' not found" not in done.stdout
