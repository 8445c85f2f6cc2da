"""`gradoc amp-compare`: fp32 against autocast applied by gradoc, on the CPU."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.test_cli import gradoc_cli

SCRIPT = textwrap.dedent(
    """
    import sys
    import torch, torch.nn as nn, torch.nn.functional as F

    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
    if "--huge" in sys.argv:  # gradients past fp16's range once scaled by 2^16
        with torch.no_grad():
            model[2].weight.mul_(300.0)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for step in range(50):
        x = torch.randn(32, 16)
        y = torch.randint(0, 4, (32,))
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
    print("the script ran to its end: the comparison should have stopped it")
    """
)


def test_bf16_autocast_against_fp32(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = tmp_path / "cmp.json"
    done = gradoc_cli("amp-compare", "--steps", "5", "--json", str(out), str(script))
    assert done.returncode == 0, done.stderr
    r = json.loads(out.read_text())
    assert r["dtype"] == "bf16" and r["steps"] == 5
    diffs = r["loss"]["rel_diff"]
    assert len(diffs) == 5 and 0 < max(diffs) < 0.05  # autocast really ran, and stayed close
    assert [x["layer"] for x in r["layers"]] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    # bf16 keeps 8 mantissa bits: errors of 1e-3..1e-1, largest far from the loss
    errors = [x["rel_error"] for x in r["layers"]]
    assert all(0 < e < 0.2 for e in errors) and errors[0] > errors[2]
    first = next((x["layer"] for x in r["layers"] if x["rel_error"] > 0.05), None)
    assert r["first_layer_beyond_tolerance"] == first and r["grad_scaler"] is None
    assert r["step_s"]["fp32"] > 0 and r["peak_bytes"]["amp"] > 0
    assert ("first layer beyond 0.05" if first else "every layer within 0.05") in done.stdout


def test_fp16_loss_scaling_skips_overflowing_steps(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = tmp_path / "cmp.json"
    done = gradoc_cli(
        "amp-compare", "--dtype", "fp16", "--steps", "6", "--json", str(out), str(script), "--huge"
    )
    assert done.returncode == 0, done.stderr
    scaler = json.loads(out.read_text())["grad_scaler"]
    history = scaler["scale_history"]
    assert history[0] == 2.0**16 and scaler["skipped_steps"]
    # every skipped step halves the scale, as GradScaler does
    for step in scaler["skipped_steps"]:
        if step + 1 < len(history):
            assert history[step + 1] == history[step] / 2
    assert "skipped steps" in done.stdout


def test_amp_compare_refuses_a_script_that_fails(tmp_path: Path) -> None:
    script = tmp_path / "bad.py"
    script.write_text("raise RuntimeError('broken before training')\n")
    done = gradoc_cli("amp-compare", "--steps", "2", str(script))
    assert done.returncode != 0 and "the fp32 run" in done.stderr and "broken" in done.stderr
