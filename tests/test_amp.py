"""Mixed-precision readiness: the statistics, the probe, the advice checked against real
fp16 autocast with GradScaler (on the CPU), and `gradoc run --check amp`."""

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
from gradoc.detect.precision import advice
from gradoc.stats.precision import (
    EXP_MIN,
    RANGE_FIELDS,
    exponent_histogram,
    merge_counts,
    range_counts,
)
from tests.test_cli import gradoc_cli


def test_range_counts_match_a_slow_reference() -> None:
    torch.manual_seed(0)
    x = torch.randn(4096) * torch.logspace(-12, 6, 4096)
    x[::97] = 0.0
    x[5] = float("nan")
    got = dict(zip(RANGE_FIELDS, range_counts(x).tolist()))
    vals = [abs(v) for v in x.tolist() if math.isfinite(v)]
    assert got["numel"] == 4096
    assert got["fp16_overflow"] == sum(v > 65504 for v in vals)
    assert got["fp16_flush"] == sum(0 < v < 2**-24 for v in vals)
    assert got["fp16_subnormal"] == sum(2**-24 <= v < 2**-14 for v in vals)
    assert got["bf16_overflow"] == 0 and got["max_abs"] == pytest.approx(max(vals))
    both = merge_counts(range_counts(x), range_counts(x * 2))
    assert both[0] == 8192 and both[-1] == pytest.approx(2 * max(vals))


def test_exponent_histogram_matches_frexp() -> None:
    g = torch.tensor([1.0, 0.75, -3.0, 2**-30, 0.0, float("inf"), 1e-40])
    hist = exponent_histogram(g).tolist()
    got = {EXP_MIN + i: int(c) for i, c in enumerate(hist) if c}
    want: dict[int, int] = {}
    for v in (1.0, 0.75, -3.0, 2**-30, 1e-40):
        e = math.frexp(v)[1]
        want[e] = want.get(e, 0) + 1
    assert got == want


def _mlp_run(out: Path, steps: int = 20) -> tuple[nn.Module, Path]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    with gradoc.watch(model, opt, out=out, check_amp=True, params=5, activations=5) as run:
        for s in range(steps):
            x, y = _batch(s)
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    model.load_state_dict(start)
    return model, run.dir


def _batch(s: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(s)
    return torch.randn(32, 16, generator=g), torch.randint(0, 4, (32,), generator=g)


def _fp16_scales(model: nn.Module, init_scale: float, steps: int = 20) -> list[float]:
    """Train under real fp16 autocast with GradScaler; the scale after each step."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=10**6)
    scales = []
    for s in range(steps):
        x, y = _batch(s)
        with torch.autocast("cpu", dtype=torch.float16):
            out = model(x)
        opt.zero_grad()
        scaler.scale(F.cross_entropy(out.float(), y)).backward()
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    return scales


def test_recommended_loss_scale_avoids_overflow_in_real_fp16(tmp_path: Path) -> None:
    model, run_dir = _mlp_run(tmp_path / "r")
    report = json.loads((run_dir / "report.json").read_text())
    amp = report["amp"]
    scale = amp["loss_scale"]
    assert scale is not None and scale >= 2**8
    first_over = next(r["scale"] for r in amp["loss_scales"] if r["overflow"])
    start = {k: v.clone() for k, v in model.state_dict().items()}
    # at the recommended scale GradScaler never finds an inf: its scale never drops
    assert _fp16_scales(model, scale) == [scale] * 20
    # the control: a scale past the predicted overflow does overflow, and is backed off
    model.load_state_dict(start)
    assert _fp16_scales(model, 4.0 * first_over)[0] < 4.0 * first_over


def test_advice_prefers_bf16_when_no_scale_fits() -> None:
    grads = {
        "a": {"max_abs": 1e5, "exponents": {"17": 10}, "fp16_overflow": 10},
        "b": {"max_abs": 1e-9, "exponents": {"-40": 100}, "fp16_overflow": 0},
    }
    adv = advice({"gradients": grads, "activations": {}})
    assert adv.loss_scale is None and adv.prefer_bf16
    assert all(r.overflow for r in adv.loss_scales)


def test_check_amp_on_the_command_line(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch, torch.nn as nn, torch.nn.functional as F

            class Sum(nn.Module):
                def forward(self, x):
                    return x.sum(1)

            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), Sum(), nn.Linear(8, 1))
            opt = torch.optim.SGD(model.parameters(), lr=1e-6)
            for step in range(12):
                x = torch.rand(2, 50000, 4) * 10
                loss = F.mse_loss(model(x) * 1e-4, x.mean((1, 2))[:, None])
                opt.zero_grad(); loss.backward(); opt.step()
            """
        )
    )
    done = gradoc_cli("run", "--check", "amp", "--out", str(tmp_path / "r"), str(script))
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    over = [f for f in report["findings"] if f["kind"] == "fp16_overflow"]
    assert over and over[0]["layer"] == "2"
    assert report["amp"]["fp32_modules"][0] == "2" and report["amp"]["prefer_bf16"]
    assert "mixed precision" in done.stderr and "keep in fp32: 2" in done.stderr
