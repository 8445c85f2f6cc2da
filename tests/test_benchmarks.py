"""The benchmarks still run (a smoke run on a tiny model; timings are not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def smoke(name: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """Run benchmarks/NAME.py --quick; it must succeed."""
    done = subprocess.run(
        [sys.executable, str(ROOT / f"benchmarks/{name}.py"), "--quick", *extra],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done


def test_overhead_benchmark_smoke(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = smoke("overhead", "--json", str(out))
    results = {r["variant"]: r for r in json.loads(out.read_text())["results"]}
    assert set(results) == {
        "plain",
        "gradoc default",
        "gradoc activations/step",
        "gradoc guard",
        "naive per-param loop",
        "detect_anomaly",
        "check_numerics",
    }
    assert results["plain"]["ratio_vs_plain"] == 1.0
    assert all(r["median_step_ms"] > 0 for r in results.values())
    assert "x plain" in done.stdout


def test_tiny_benchmark_parts_smoke(tmp_path: Path) -> None:
    """The cost of a fast step, part by part: the floor of the per-step ops, gradoc's
    Python and writer, the sampled statistics, each variant run (timings not asserted)."""
    out = tmp_path / "parts.json"
    done = smoke("tiny", "--parts", "--json", str(out))
    (row,) = json.loads(out.read_text())
    assert row["model"] == "mlp" and row["plain_ms"] > 0 and row["ratio"] > 0
    assert {"ops_ms", "hooks_ms", "python_ms", "sampled_ms", "total_ms", "minimal_ms"} <= set(row)
    assert "hook points" in done.stdout
    assert "per-step ops" in done.stdout


def test_tiny_benchmark_inside_smoke(tmp_path: Path) -> None:
    """The time inside gradoc's hook points: each point was reached and timed (every step
    has a forward, a backward(), a statistics point and a step end), and the writer thread
    worked (timings not asserted)."""
    out = tmp_path / "inside.json"
    done = smoke("tiny", "--inside", "--json", str(out))
    (row,) = json.loads(out.read_text())
    points = ("forward", "backward()", "statistics point", "step end", "writer thread (CPU)")
    assert all(row[p] > 0 for p in points), row
    assert row["hook points"] == pytest.approx(sum(row[p] for p in points[:-1]))
    assert "ms per step inside gradoc" in done.stdout


def test_tiny_benchmark_cycle_smoke(tmp_path: Path) -> None:
    """Where in a cycle of steps gradoc's cost lands: every position of the cycle measured
    (timings not asserted; a step is never faster than the median by more than itself)."""
    out = tmp_path / "cycle.json"
    done = smoke("tiny", "--cycle", "--json", str(out))
    (row,) = json.loads(out.read_text())
    assert row["model"] == "mlp" and row["median_ms"] > 0
    assert len(row["by_position_us"]) == 50
    assert all(us > -row["median_ms"] * 1e3 for us in row["by_position_us"])
    assert "dearest positions in a cycle of 50 steps" in done.stdout
    assert row["by_kind_us"] and "by kind (mean excess; its share a step)" in done.stdout


def test_tiny_benchmark_cycle_apart_smoke(tmp_path: Path) -> None:
    """``--flush``: transfers apart from the sampled steps, each kind's cost on its own."""
    out = tmp_path / "cycle.json"
    done = smoke("tiny", "--cycle", "--flush", "60", "--json", str(out))
    (row,) = json.loads(out.read_text())
    assert {"transfer", "after"} <= set(row["by_kind_us"])
    assert "the 3 after a transfer" in done.stdout
    bad = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/tiny.py"), "--flush", "60"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "--flush N goes with --cycle" in bad.stderr


def test_tiny_cycle_sorts_steps_by_kind() -> None:
    """Each kind's mean excess over the median, its share of every step, and the steps after
    a transfer summed (a step that both sampled and transferred is neither alone)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import tiny
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    ms = 1e-3
    steps = [[ms, False, False]] * 3 + [[5 * ms, True, False], [4 * ms, False, True]]
    steps += [[2 * ms, False, False], [3 * ms, False, False], [ms, False, False]]
    steps += [[9 * ms, True, True]] + [[ms, False, False]] * 4
    got = tiny._by_kind(steps, ms)
    assert got["sampled"] == pytest.approx(4 * ms) and got["transfer"] == pytest.approx(3 * ms)
    assert got["both"] == pytest.approx(8 * ms)
    assert got["after"] == pytest.approx((ms + 2 * ms + 0.0 + 0.0) / 2)  # (1+2+0) and (0+0+0)
    assert got["transfer a step"] == pytest.approx(3 * ms / len(steps))


def test_detect_benchmark_smoke() -> None:
    done = smoke("detect")
    assert "full report" in done.stdout and "200 steps" in done.stderr


def test_locate_latency_benchmark_smoke() -> None:
    done = smoke("locate_latency")
    assert "origin: forward: aten.div.Tensor" in done.stdout


def test_locate_vs_anomaly_benchmark_smoke() -> None:
    done = smoke("locate_vs_anomaly")
    assert "located: gradoc 12/12" in done.stdout


def test_scaling_benchmark_smoke(tmp_path: Path) -> None:
    out = tmp_path / "scaling.json"
    done = smoke("scaling", "--json", str(out))
    data = json.loads(out.read_text())
    settings = [r["setting"] for r in data["plan"]["rows"]]
    assert settings[0] == "none" and "every 3" in settings  # sqrt(12) rounded
    assert "fp32 vs bfloat16 autocast" in done.stdout and "x time" in done.stdout


def test_bucketing_benchmark_smoke(tmp_path: Path) -> None:
    out = tmp_path / "bucketing.json"
    done = smoke("bucketing", "--json", str(out))
    data = json.loads(out.read_text())
    assert set(data) == {"random", "length buckets", "token budget"}
    assert data["length buckets"]["padding_ratio"] < data["random"]["padding_ratio"]
    assert "real tok/s" in done.stdout


def test_width_benchmark_smoke(tmp_path: Path) -> None:
    out = tmp_path / "width.json"
    done = smoke("width", "--json", str(out))
    data = json.loads(out.read_text())
    assert [r["tensors"] for r in data["rows"]] == [10, 100]
    assert all(r[v] > 0 for r in data["rows"] for v in ("plain", "floor", "default", "guard"))
    long = data["long"]  # the long run's close, report and --html were timed
    assert long["steps"] == 30 and long["log_bytes"] > 0 and long["html_s"] > 0
    assert 0 < long["train_peak_mb"] <= long["close_peak_mb"]
    assert "per extra tensor" in done.stdout and "B/step/tensor" in done.stdout


def test_startup_benchmark_smoke(tmp_path: Path) -> None:
    out = tmp_path / "startup.json"
    done = smoke("startup", "--json", str(out))
    data = json.loads(out.read_text())
    assert data["rounds"] == 1 and data["plain_s"] > 0 and data["gradoc_run_s"] > 0
    assert data["added_s"] == data["gradoc_run_s"] - data["plain_s"]
    assert "40-step script" in done.stdout and "adds" in done.stdout


def test_accuracy_benchmark_quick_slice(tmp_path: Path) -> None:
    """One labelled run per fault family of the corpus, two healthy: every family is
    headlined and its root cause named, every NaN's op and line found, no false alarm."""
    out = tmp_path / "acc.json"
    done = smoke("accuracy", "--json", str(out))
    (summary,) = json.loads(out.read_text())
    assert summary["runs"] + len(summary["left_out"]) == 17  # 15 families + 2 healthy
    assert summary["false_alarms"] == 0
    assert summary["headline"] == 1.0 and summary["root_cause"] == 1.0, done.stdout
    assert summary["origin"] == 1.0, done.stdout
    assert "| headline kind right |" in done.stdout and "headline by fault" in done.stdout


def test_accuracy_long_split_slice(tmp_path: Path) -> None:
    """The long split's NaN faults on the MLP (2,000 steps, struck at step 1,203, past the
    lean reads' start): read every step and every 10, each is found, headlined and dated
    alike, and the op of a NaN born in the forward or the loss is named by both."""
    out = tmp_path / "long.json"
    done = smoke("accuracy", "--long", "--only", "mlp:num_", "--json", str(out))
    summary = json.loads(out.read_text())
    every, lean = summary["arms"]["every step"], summary["arms"]["lean, every 10"]
    assert every["faulty"] == lean["faulty"] == 3, done.stdout
    assert every["headline"] == lean["headline"] == 1.0, done.stdout
    assert every["onset"] == lean["onset"] == 1.0, done.stdout
    assert summary["lost"] == summary["late"] == [], done.stdout
    assert every["origin"] == 1.0, done.stdout
    # the backward-born one went unread on its lean step: found a step late, its op unnamed
    # in process (gradoc run re-runs to name it)
    assert lean["origin"] == 2 / 3, done.stdout


def test_fixes_benchmark_slice(tmp_path: Path) -> None:
    """Bug programs of ``benchmarks/bugs`` through ``gradoc run`` and ``gradoc fix``: a
    softmax before nll_loss, a KL term subtracted, a model left in eval(), an optimizer given
    the head alone, labels that score the pads (Hugging Face), a learning rate 100x (the
    second, lower try), a weight decay 1000x and a clip set to inf by a flag for a hand-written
    update. Each is repaired: its fix verified, the fixed run healthy, its loss the healthy
    program's."""
    out = tmp_path / "fixes.json"
    bugs = [
        "tabular_nll_softmax",
        "vae_kl_subtracted",
        "digits_eval_left_on",
        "finetune_head_only",
        "lm_pad_labels",
        "sine_lr_x100",
        "tabular_weight_decay",
        "demand_clip_off",
    ]
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/fixes.py"), *bugs, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    rows = {r["bug"]: r for r in json.loads(out.read_text())}
    for name in bugs:
        assert rows[name]["result"] == "repaired", (name, rows[name], done.stderr)
    assert rows["sine_lr_x100"]["fix"] == "the learning rate x0.01 where the optimizer is made"
    # no optimizer for gradoc's own clip to reach: the program's flag, at the usual 1.0
    assert rows["demand_clip_off"]["fix"].startswith("the gradient-clip flags set to 1 (")
    assert "| tabular_nll_softmax | loss_on_probabilities |" in done.stdout
