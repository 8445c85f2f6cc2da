"""Statistics against the obvious slow implementations."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn as nn

from gradoc.stats import (
    activation_stats,
    combine,
    max_abs,
    nonfinite_counts,
    norms,
    plan,
    saturation_rule,
    unit_dim,
    update_stats,
)

RTOL = 1e-5


def _tensors() -> list[torch.Tensor]:
    return [torch.randn(7, 5), torch.randn(3) * 100, torch.randn(2, 3, 4) * 1e-4, torch.zeros(4)]


def test_norms_and_max_abs_match_per_tensor_reference() -> None:
    ts = _tensors()
    got = norms(ts).tolist()
    got_max = max_abs(ts).tolist()
    for t, n, m in zip(ts, got, got_max):
        assert n == pytest.approx(t.norm().item(), rel=RTOL)
        assert m == pytest.approx(t.abs().max().item(), rel=RTOL)


def test_fp16_norm_is_accumulated_in_fp32_and_does_not_overflow() -> None:
    t = torch.full((100_000,), 300.0, dtype=torch.float16)
    assert torch.linalg.vector_norm(t).isinf()  # the naive fp16 norm overflows
    assert norms([t]).item() == pytest.approx(300.0 * math.sqrt(100_000), rel=1e-3)


def test_mixed_dtypes_keep_input_order() -> None:
    ts = [
        torch.ones(4, dtype=torch.float16),
        torch.full((9,), 2.0),
        torch.ones(1, dtype=torch.float64),
    ]
    assert norms(ts).tolist() == pytest.approx([2.0, 6.0, 1.0])
    assert max_abs(ts).tolist() == pytest.approx([1.0, 2.0, 1.0])


def test_sparse_gradient_norm_matches_dense() -> None:
    emb = nn.Embedding(10, 3, sparse=True)
    emb(torch.tensor([1, 1, 4])).sum().backward()
    g = emb.weight.grad
    assert g is not None and g.is_sparse
    assert norms([g]).item() == pytest.approx(g.to_dense().norm().item(), rel=RTOL)
    assert max_abs([g]).item() == pytest.approx(g.to_dense().abs().max().item(), rel=RTOL)


def test_nonfinite_values_show_in_max_abs_and_are_counted() -> None:
    t = torch.tensor([1.0, math.nan, math.inf, -math.inf, 2.0])
    assert math.isnan(max_abs([t]).item())
    assert math.isinf(max_abs([torch.tensor([1.0, -math.inf])]).item())
    assert nonfinite_counts([t, torch.ones(3)]).tolist() == [3.0, 0.0]


def test_empty_inputs() -> None:
    assert norms([]).numel() == 0 and max_abs([]).numel() == 0
    assert max_abs([torch.zeros(0)]).tolist() == [0.0]


def test_update_stats_are_weight_norms_and_update_norms() -> None:
    before = [torch.randn(4, 4), torch.randn(3)]
    after = [b + 0.01 * torch.randn_like(b) for b in before]
    v = update_stats(after, before).tolist()
    assert v[:2] == pytest.approx([b.norm().item() for b in before], rel=RTOL)  # pre-update
    assert v[2:] == pytest.approx([(a - b).norm().item() for a, b in zip(after, before)], rel=RTOL)


def _wide_list() -> list[torch.Tensor]:
    """A wide model's tensors: many small ones sharing shapes (stacked by a plan), large and
    one-of-a-kind ones (foreach), an empty one, a NaN and an Inf among the small ones."""
    ts = [torch.randn(6, 5) * (i + 1) for i in range(40)] + [torch.randn(5) for _ in range(30)]
    ts += [torch.randn(200, 100), torch.randn(7, 3), torch.zeros(0), torch.randn(())]
    ts[3][1, 2], ts[50][0] = math.nan, -math.inf
    order = torch.randperm(len(ts), generator=torch.Generator().manual_seed(0)).tolist()
    return [ts[i] for i in order]


def test_a_plan_reduces_a_wide_list_stacked_exactly_as_foreach_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import gradoc.stats.tensors as tensors

    monkeypatch.setattr(tensors, "STACK_MAX", 64)  # stacks of two tensors: chunks are tested
    ts = _wide_list()
    p = plan(ts)
    assert p is not None and len(p.groups) > 2 and p.rest is not None
    for got, want in [
        (norms(ts, plan=p), norms(ts)),
        (norms(ts, wide=True, plan=p), norms(ts, wide=True)),
        (max_abs(ts, plan=p), max_abs(ts)),
        (update_stats(ts, [t * 0.5 for t in ts], plan=p), update_stats(ts, [t * 0.5 for t in ts])),
    ]:
        assert got.dtype == want.dtype == torch.float64
        assert torch.equal(got.isnan(), want.isnan())
        assert got.nan_to_num(0.0).tolist() == pytest.approx(
            want.nan_to_num(0.0).tolist(), rel=1e-6
        )
    assert math.isnan(max_abs(ts, plan=p)[[t.isnan().any().item() for t in ts]].item())
    assert plan(ts[:10]) is None  # a short list: foreach is as fast


def test_a_snapshot_by_plan_measures_an_update_exactly_as_copies_do() -> None:
    from gradoc.stats import Snapshot

    weights = [t.nan_to_num(0.5, 0.5, 0.5) for t in _wide_list()]
    p = plan(weights)
    assert p is not None
    snapshot, copies = Snapshot(p, weights), [w.clone() for w in weights]
    for w in weights:  # the optimizer's update, in place
        w.add_(torch.randn_like(w) * 0.01)
    got = snapshot.update_stats(weights, None)
    assert got is not None and torch.equal(got, update_stats(weights, copies))
    assert Snapshot(p, weights).update_stats(weights[:-1], None) is None  # does not fit


def test_a_plan_that_no_longer_fits_its_tensors_is_dropped_not_wrong() -> None:
    ts = _wide_list()
    p = plan(ts)
    assert p is not None
    changed = [t.reshape(-1) if t.shape == (6, 5) and i % 2 else t for i, t in enumerate(ts)]
    assert norms(changed, plan=p).tolist() == pytest.approx(norms(changed).tolist(), nan_ok=True)
    assert p.broken  # refused: the caller makes a new plan
    assert norms(ts[:-1], plan=p).numel() == len(ts) - 1


def _reference(x: torch.Tensor) -> tuple[float, float, float, int]:
    return (
        x.mean().item(),
        x.std(unbiased=False).item(),
        (x == 0).float().mean().item(),
        int((~x.isfinite()).sum()),
    )


def test_activation_stats_match_reference() -> None:
    x = torch.relu(torch.randn(6, 10, 8))
    vec, active = activation_stats(x, None, unit_dim(nn.ReLU(), x))
    s = combine([(x.numel(), vec.tolist())], [active.tolist() if active is not None else None])
    mean, std, zero_frac, nonfinite = _reference(x)
    assert s.mean == pytest.approx(mean, rel=RTOL)
    assert s.std == pytest.approx(std, rel=RTOL)
    assert s.zero_frac == pytest.approx(zero_frac)
    assert s.nonfinite == nonfinite == 0
    assert s.sat_frac is None  # ReLU has no saturation range
    assert s.positions == 60
    assert s.unit_active == pytest.approx((x > 0).float().mean(dim=(0, 1)).tolist())


@pytest.mark.parametrize(
    ("shape", "units"), [((16, 20), -1), ((4, 3, 8), -1), ((2, 3, 4, 5), 1), ((7,), None)]
)
@pytest.mark.parametrize("saturating", [False, True])
def test_stacked_outputs_are_summarised_as_each_one_alone(
    shape: tuple[int, ...], units: int | None, saturating: bool
) -> None:
    from gradoc.stats import activation_stats_rows

    outputs = torch.randn(5, *shape) * 3
    outputs[2].view(-1)[0] = math.nan
    outputs[3].view(-1)[:3] = 0.0
    rule = saturation_rule(nn.Tanh()) if saturating else None
    vecs, actives = activation_stats_rows(outputs, rule, units)
    for i, x in enumerate(outputs):
        vec, active = activation_stats(x, rule, units)
        assert torch.allclose(vecs[i], vec, rtol=1e-6, equal_nan=True), (i, vecs[i], vec)
        assert (active is None and actives is None) or torch.equal(actives[i], active)


def test_combine_of_calls_equals_stats_of_the_concatenation() -> None:
    parts = [torch.randn(4, 8) * 3 + 1, torch.randn(10, 8), torch.randn(2, 8) - 5]
    calls, actives = [], []
    for p in parts:
        v, a = activation_stats(p, saturation_rule(nn.Tanh()), -1)
        calls.append((p.numel(), v.tolist()))
        actives.append(a.tolist() if a is not None else None)
    s = combine(calls, actives)
    whole = torch.cat(parts)
    assert s.numel == whole.numel()
    assert s.mean == pytest.approx(whole.mean().item(), rel=RTOL)
    assert s.std == pytest.approx(whole.std(unbiased=False).item(), rel=RTOL)
    assert s.sat_frac == pytest.approx((1 - whole**2 < 0.01).float().mean().item())
    assert s.unit_active == pytest.approx((whole > 0).float().mean(0).tolist())
    # the writer passes slices of the host array: the same numbers
    as_arrays = combine(calls, [np.asarray(a) if a is not None else None for a in actives])
    assert as_arrays.unit_active.tolist() == s.unit_active.tolist()
    assert (as_arrays.mean, as_arrays.std) == (s.mean, s.std)


@pytest.mark.parametrize(
    ("output", "rule"),
    [
        (torch.randn(6, 8) * 3 + 1, saturation_rule(nn.Tanh())),  # units, saturation
        (torch.randn(5), None),  # one unit dimension only, no saturation rule
        (torch.tensor([[1.0, float("nan")], [0.0, -2.0]]), None),  # a non-finite value
        (torch.empty(0, 4), None),  # an empty output
    ],
)
def test_a_module_called_once_writes_the_row_combine_writes(
    output: torch.Tensor, rule: object
) -> None:
    """The writer's row of a module called once (``combine`` without its merge) is the row
    its merge gives once an empty call is added."""
    from gradoc.collect.probes.activations import _act_row

    v, a = activation_stats(output, rule, -1 if output.dim() >= 2 else None)
    width = len(a) if a is not None else 0
    # the writer's host vector: this call's statistics, then an empty call's (all zeros)
    host = torch.cat([v, a if a is not None else v[:0], v.new_zeros(5 + width)]).numpy()
    values = host.tolist()
    units, empty_units = (
        (slice(5, 5 + width), slice(10 + width, 10 + 2 * width))
        if width
        else (
            None,
            None,
        )
    )
    call = (output.numel(), slice(0, 5), units)
    empty = (0, slice(5 + width, 10 + width), empty_units)
    merged = _act_row(7, 3, [call, empty], values, host)  # combine's merge of the two
    one = _act_row(7, 3, [call], values, host)
    assert one[2] == 1 and merged[2] == 2
    for fast, slow in zip(one[3:], merged[3:]):
        if isinstance(fast, float):
            assert fast == pytest.approx(slow, rel=1e-12)
        else:
            assert fast == slow


@pytest.mark.parametrize(
    ("module", "pre", "saturated"),
    [
        (nn.Sigmoid(), torch.tensor([0.0, 5.0, 6.5, -7.0]), 2),  # |x| > 5.99
        (nn.Tanh(), torch.tensor([0.0, 2.5, 3.5, -4.0]), 2),  # |x| > 2.99
        (nn.ReLU6(), torch.tensor([-1.0, 3.0, 6.0, 9.0]), 3),  # at 0 or 6
        (nn.Hardtanh(), torch.tensor([-2.0, 0.0, 0.5, 1.0]), 2),
        (nn.Softsign(), torch.tensor([0.0, 5.0, 10.0, -20.0]), 2),  # |y| > 0.9
    ],
)
def test_saturation_rules_per_family(module: nn.Module, pre: torch.Tensor, saturated: int) -> None:
    rule = saturation_rule(module)
    assert rule is not None
    assert int(rule(module(pre)).sum()) == saturated


def test_no_saturation_rule_outside_the_families() -> None:
    assert saturation_rule(nn.ReLU()) is None
    assert saturation_rule(nn.Linear(2, 2)) is None


def test_unit_dim_heuristics() -> None:
    assert unit_dim(nn.Linear(3, 4), torch.zeros(8, 4)) == -1
    assert unit_dim(nn.Linear(3, 4), torch.zeros(8, 16, 4)) == -1  # (batch, time, features)
    assert unit_dim(nn.Conv1d(3, 4, 1), torch.zeros(8, 4, 16)) == 1  # (batch, channels, length)
    assert unit_dim(nn.ReLU(), torch.zeros(8, 4, 5, 5)) == 1  # NCHW
    assert unit_dim(nn.ReLU(), torch.zeros(5)) is None  # no batch dimension
    assert unit_dim(nn.Linear(3, 50_000), torch.zeros(2, 50_000)) is None  # too many units


def test_activation_stats_count_nonfinite_outputs() -> None:
    x = torch.tensor([[1.0, math.nan], [math.inf, 0.0]])
    vec, _ = activation_stats(x)
    s = combine([(4, vec.tolist())], [None])
    assert s.nonfinite == 2
    assert s.zero_frac == 0.25
    assert math.isnan(s.mean)


def test_scratch_buffer_gives_the_same_statistics() -> None:
    x = torch.randn(4, 6, 5)
    scratch = torch.full((200,), 123.0)
    fresh = activation_stats(x, saturation_rule(nn.Sigmoid()), -1)
    reused = activation_stats(x, saturation_rule(nn.Sigmoid()), -1, scratch)
    assert torch.equal(fresh[0], reused[0]) and torch.equal(fresh[1], reused[1])  # type: ignore[arg-type]


def test_update_norms_survive_weights_an_update_made_huge() -> None:
    before = [torch.full((4, 4), 1e20)]
    after = [torch.full((4, 4), 1e21)]  # squares overflow float32
    w, u = update_stats(after, before).tolist()
    assert w == pytest.approx(4e20) and u == pytest.approx(3.6e21)
