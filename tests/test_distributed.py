"""`torchrun --nproc_per_node 2 -m gradoc run`: per-rank logs, one merged report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import gradoc
from tests.models import torchrun

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "ddp_train.py"


def _torchrun(out: Path, *script_args: str) -> subprocess.CompletedProcess[str]:
    return torchrun("-m", "gradoc", "run", "--out", str(out), str(SCRIPT), *script_args)


def test_ddp_global_norm_is_the_full_batch_norm(tmp_path: Path) -> None:
    _torchrun(tmp_path / "ddp")
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        from ddp_train import model_and_data
    finally:
        sys.path.pop(0)
    model, xs, ys = model_and_data()  # one process, the whole batch of step 0
    F.mse_loss(model(xs[0]), ys[0]).backward()
    full = float(torch.nn.utils.get_total_norm([p.grad for p in model.parameters()]))
    for log_dir in (tmp_path / "ddp", tmp_path / "ddp" / "rank1"):
        recorded = gradoc.open_run(log_dir).scalar("grad_norm").values[0]
        assert recorded == pytest.approx(full, rel=1e-6)
    report = json.loads((tmp_path / "ddp" / "report.json").read_text())
    assert report["run"]["ranks"] == {"world_size": 2, "merged": [0, 1]}


def test_nan_on_rank_1_is_reported_with_its_rank_and_origin(tmp_path: Path) -> None:
    _torchrun(tmp_path / "ddp", "--nan")
    report = json.loads((tmp_path / "ddp" / "report.json").read_text())
    story = next(f for f in report["findings"] if f["kind"] == "nonfinite")
    assert story["rank"] == 1 and story["step"] == 3
    origin = story["origin"]
    assert (origin["phase"], origin["op"], origin["module"]) == ("forward", "aten.div.Tensor", "0")
    assert origin["file"] == str(SCRIPT) and "BUG: no epsilon" in origin["code"]


def test_fsdp2_records_the_norms_of_the_full_gradients(tmp_path: Path) -> None:
    pytest.importorskip("torch.distributed.fsdp")
    out = tmp_path / "fsdp"
    fsdp = str(ROOT / "tests" / "fsdp_train.py")
    torchrun("-m", "gradoc", "run", "--out", str(out), fsdp, str(tmp_path))
    want = json.loads((tmp_path / "norms-0.json").read_text())
    for log_dir in (out, out / "rank1"):
        with gradoc.open_run(log_dir) as log:
            got = {name: log.param(name, "grad_norm").values[0] for name in want}
        assert got == pytest.approx(want, rel=1e-6)
