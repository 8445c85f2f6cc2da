"""``adam_epsilon``: gradients below Adam's epsilon, which then divides the step."""

from __future__ import annotations

import json
import math
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
    if not found:
        assert "adam_epsilon" not in kinds, kinds
        return
    assert kinds[0] == "adam_epsilon", kinds  # it heads what it causes
    (f,) = [f for f in report["findings"] if f["kind"] == "adam_epsilon"]
    assert "eps (1e-08)" in f["summary"] and "1e-15" in f["fixes"][0]["action"]
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


def _history(grad_rms: float, step_ratio: float, eps: float = 1e-8, kind: str = "AdamW"):
    """Two 8x8 weight matrices whose gradient RMS and update RMS / lr are these, lr 1e-3."""
    n, steps, lr = 64, 40, 1e-3
    stats = {
        name: {
            "grad_norm": [grad_rms * math.sqrt(n)] * steps,
            "update_norm": [step_ratio * lr * math.sqrt(n)] * steps,
        }
        for name in ("a.weight", "b.weight")
    }
    h = synthetic(loss=[1.0] * steps, param_stats=stats, shapes={k: (8, 8) for k in stats})
    meta = RunMeta(optimizers=[{"type": kind, "lr": lr, "eps": eps}])
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
