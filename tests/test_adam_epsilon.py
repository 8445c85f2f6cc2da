"""``adam_epsilon``: gradients below Adam's epsilon, which then divides the step."""

from __future__ import annotations

import json
import math
import sqlite3
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from gradoc.detect.history import synthetic
from gradoc.findings import REGISTRY
from gradoc.store import Series
from gradoc.store.meta import RunMeta
from tests.test_cli import gradoc_cli

SCALED = textwrap.dedent(
    """
    import sys
    import torch, torch.nn as nn, torch.nn.functional as F

    torch.manual_seed(0)
    target = torch.randn(16, 1)
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, eps=float(sys.argv[1]))
    for step in range(300):
        x = torch.randn(64, 16)
        loss = F.mse_loss(model(x), x @ target)
        opt.zero_grad()
        (loss / 64 / 1e7).backward()  # a mean divided again, and again: a loss scaled far down
        opt.step()
    print("loss", loss.item())
    """
)


@pytest.mark.parametrize(("eps", "found"), [("1e-8", True), ("1e-15", False)])
def test_a_loss_scaled_far_down_under_adams_epsilon_is_found_and_a_small_eps_cures_it(
    tmp_path: Path, eps: str, found: bool
) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCALED)
    out = tmp_path / "run"
    done = gradoc_cli(
        "run", "--out", str(out), "--json", str(tmp_path / "r.json"), str(script), eps
    )
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    kinds = [f["kind"] for f in report["findings"] if f["severity"] != "info"]
    state = json.loads(
        sqlite3.connect(out / "run.db")
        .execute("select value from meta where key = 'adam_state'")
        .fetchone()[0]
    )
    assert state["eps"] == float(eps) and set(state["eps_share"]) == {"0.weight", "2.weight"}
    if not found:  # with eps 1e-15 the same gradients are far above it
        assert max(state["eps_share"].values()) < 0.01, state
        assert "adam_epsilon" not in kinds, kinds
        return
    assert kinds[0] == "adam_epsilon", kinds  # it heads what it causes
    (f,) = [f for f in report["findings"] if f["kind"] == "adam_epsilon"]
    assert "eps (1e-08)" in f["summary"] and "1e-15" in f["fixes"][0]["action"]
    # the optimizer's own second moments, read at the end: sqrt(v_hat) <= eps nearly everywhere
    said = {e["signal"]: e["value"] for e in f["evidence"]}
    assert float(said["their elements with sqrt(v) <= eps at the end (median)"]) > 0.9
    # gradoc fix writes eps=1e-15 where the optimizer is made, in a copy, and verifies it
    fixed = gradoc_cli("fix", "--json", str(tmp_path / "fix.json"), str(tmp_path / "run"),
                       str(script), eps)  # fmt: skip
    assert fixed.returncode == 0, fixed.stderr
    result = json.loads((tmp_path / "fix.json").read_text())
    assert result["verdict"] == "verified", result["why_not"]
    assert result["patch"]["after"] == [
        "opt = torch.optim.AdamW(model.parameters(), lr=3e-3, eps=1e-15)"
    ]
    assert "eps=float(sys.argv[1])" in script.read_text()  # the user's file as it was


def _history(
    grad_rms: float,
    step_ratio: float,
    eps: float = 1e-8,
    kind: str = "AdamW",
    state: float | None = None,
    early: float | None = None,
):
    """Two 8x8 weight matrices whose gradient RMS and update RMS / lr are these, lr 1e-3
    (``early``: the update RMS / lr of the first half, where it differs)."""
    n, steps, lr = 64, 40, 1e-3
    ratios = [early if early is not None and s < steps // 2 else step_ratio for s in range(steps)]
    stats = {
        name: {
            "grad_norm": [grad_rms * math.sqrt(n)] * steps,
            "update_norm": [r * lr * math.sqrt(n) for r in ratios],
        }
        for name in ("a.weight", "b.weight")
    }
    h = synthetic(loss=[1.0] * steps, param_stats=stats, shapes={k: (8, 8) for k in stats})
    read = {"eps_share": dict.fromkeys(stats, state)} if state is not None else None
    meta = RunMeta(optimizers=[{"type": kind, "lr": lr, "eps": eps}], adam_state=read)
    return replace(h, lr=Series(list(range(steps)), [lr] * steps), meta=meta)


@pytest.mark.parametrize(
    ("grad_rms", "step_ratio", "kind", "found"),
    [
        (1e-11, 0.003, "AdamW", True),  # below eps, the step divided by it
        (1e-3, 0.2, "AdamW", False),  # a normalised step
        (0.0, 0.0, "AdamW", False),  # no gradient: nothing eps could divide
        (1e-11, 0.2, "AdamW", False),  # below eps but stepping (a larger eps elsewhere)
        (1e-11, 0.003, "SGD", False),  # SGD has no eps
    ],
)
def test_the_rule_needs_gradients_under_eps_and_a_step_far_under_the_rate(
    grad_rms: float, step_ratio: float, kind: str, found: bool
) -> None:
    got = REGISTRY["adam_epsilon"].check(_history(grad_rms, step_ratio, kind=kind))
    assert bool(got) is found


@pytest.mark.parametrize(("state", "found"), [(None, True), (0.97, True), (0.02, False)])
def test_the_optimizer_s_own_second_moments_confirm_or_overrule_the_gradient_norms(
    state: float | None, found: bool
) -> None:
    """The gradient norms say eps divides the step; where the state was read at the end,
    its ``sqrt(v_hat)`` must be under eps on most elements too."""
    got = REGISTRY["adam_epsilon"].check(_history(1e-11, 0.003, state=state))
    assert bool(got) is found
    if got and state is not None:
        assert got[0].evidence[-1].value == "0.97"


@pytest.mark.parametrize("amsgrad", [False, True])
def test_the_state_is_read_as_adam_divides_by_it(amsgrad: bool) -> None:
    """``sqrt(v_hat)`` against eps on each weight matrix (biases left out), from
    ``exp_avg_sq`` (``max_exp_avg_sq`` with AMSGrad), bias-corrected at the state's step."""
    import torch

    from gradoc.collect.attach.layers import WatchedParam
    from gradoc.collect.probes.adam_state import eps_shares
    from gradoc.collect.probes.grads import WatchedOptimizer

    small, large = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
    opt = torch.optim.Adam([*small.parameters(), *large.parameters()], eps=1e-8, amsgrad=amsgrad)
    for _ in range(3):
        opt.zero_grad()
        small.weight.grad = torch.full((8, 8), 1e-10)  # sqrt(v_hat) = 1e-10 < eps
        large.weight.grad = torch.full((8, 8), 1e-3)
        small.bias.grad, large.bias.grad = torch.zeros(8), torch.zeros(8)
        opt.step()
    params = [
        WatchedParam(i, p, name, name.split(".")[0], 0)
        for i, (name, p) in enumerate(
            [("small.weight", small.weight), ("small.bias", small.bias),
             ("large.weight", large.weight)]
        )
    ]  # fmt: skip
    before = {id(p): {k: v.clone() for k, v in s.items()} for p, s in opt.state.items()}
    read = eps_shares([WatchedOptimizer(opt, params)], step=3)["adam_state"]
    assert read["step"] == 3 and read["eps"] == 1e-8
    assert read["eps_share"] == {"small.weight": 1.0, "large.weight": 0.0}
    for p, s in opt.state.items():  # only read
        assert all(torch.equal(v, before[id(p)][k]) for k, v in s.items())
    assert eps_shares([WatchedOptimizer(torch.optim.SGD(small.parameters()), params)], 3) == {}


def test_an_update_that_shrank_since_the_start_is_told_against_its_own_history() -> None:
    """Wortsman et al.'s case: the gradients fall toward eps as training goes on, and the
    update shrinks with them (here from 0.2 of the learning rate to 0.003)."""
    from gradoc.diagnose import diagnose

    h = _history(1e-11, 0.003, early=0.2)
    (found,) = REGISTRY["adam_epsilon"].check(h)
    said = {e.signal: e.value for e in found.evidence}
    assert said["update RMS / learning rate, first samples (median)"] == "0.2"
    (story,) = diagnose(h, [found])
    eps = next(x.to_json() for x in story.hypotheses if x.family == "numerics")
    assert any("fell from 0.2 of the learning rate" in s for s in eps["support"])
    (steady,) = diagnose(
        _history(1e-11, 0.003), REGISTRY["adam_epsilon"].check(_history(1e-11, 0.003))
    )
    eps = next(x.to_json() for x in steady.hypotheses if x.family == "numerics")
    assert not any("fell from" in s for s in eps["support"])
