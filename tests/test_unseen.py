"""Diagnoses that hold on runs written independently of the rules: the patterns seen on
public training programs (makemore, minGPT, nanoGPT, pytorch/examples), rewritten as
small scripts in tests/unseen/ and run unchanged under `gradoc run`. Each asserts the
headline (the first warning or error) and its root cause."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import gradoc
from gradoc.detect import History
from gradoc.detect.finding import Finding
from gradoc.diagnose import diagnose
from gradoc.findings.loss_plateau import Plateau

UNSEEN = Path(__file__).parent / "unseen"


def gradoc_run(tmp_path: Path, script: str, *args: str) -> tuple[dict[str, Any], str]:
    """``gradoc run`` of ``script`` (in unseen/, or an absolute path) into ``tmp_path/run``:
    its report.json and what it printed."""
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "gradoc", "run", "--out", str(out), str(UNSEEN / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    return json.loads((out / "report.json").read_text()), done.stdout


def headline(report: dict[str, Any]) -> dict[str, Any]:
    return next(f for f in report["findings"] if f["severity"] in ("error", "warning"))


def related(finding: dict[str, Any]) -> set[str]:
    return {r["kind"] for r in finding["related"]}


def test_enormous_finite_gradients_are_an_explosion_not_healthy(tmp_path: Path) -> None:
    """16 ReLU layers from N(0, 1): norms overflowed float32 and the run was "healthy"."""
    report, stdout = gradoc_run(tmp_path, "relu16_normal_init.py")
    top = headline(report)
    assert top["kind"] == "exploding_gradients" and top["step"] == 0
    assert top["root_cause"].startswith("weight initialisation too large")
    # the norm is measured, not dropped: ~1e24, finite
    log = gradoc.open_run(tmp_path / "run")
    first = log.scalar("grad_norm").values[0]
    assert math.isfinite(first) and first > 1e20
    # and the user's program saw its gradients: an update gradoc mistook for NaN was skipped
    assert stdout.splitlines()[0].split()[2] != "nan"


def test_a_log_of_zero_in_the_loss_headlines_the_log_line(tmp_path: Path) -> None:
    report, _ = gradoc_run(tmp_path, "log_of_softmax_loss.py")
    top = headline(report)
    # read from the loss's autograd graph at backward() (the op by its node's name)
    assert top["kind"] == "nonfinite" and top["origin"]["op"] in ("log", "aten.log.default")
    assert top["origin"]["code"] == "loss = -torch.log(probs[torch.arange(len(y)), y]).mean()"
    assert top["root_cause"].startswith(top["origin"]["op"] + " (forward pass)")
    assert "learning rate too high" not in top["root_cause"]
    assert [f["kind"] for f in report["findings"] if f["severity"] != "info"] == ["nonfinite"]


def test_sqrt_at_zero_in_the_backward_is_the_root_not_a_divergence(tmp_path: Path) -> None:
    report, _ = gradoc_run(tmp_path, "sqrt_of_zero_distance.py")
    top = headline(report)
    assert top["kind"] == "nonfinite" and top["step"] == 15
    origin = top["origin"]
    assert (origin["op"], origin["phase"]) == ("SqrtBackward0", "backward")
    assert origin["code"] == "dist = torch.sqrt(((a - b) ** 2).sum(1))"
    assert "learning rate" not in top["root_cause"]
    kinds = [f["kind"] for f in report["findings"] if f["severity"] != "info"]
    assert kinds == ["nonfinite"], kinds  # what follows the NaN is its consequence


@pytest.mark.parametrize("functional", [False, True])
def test_adam_at_lr_3_is_a_learning_rate_story_not_a_bias(tmp_path: Path, functional: bool) -> None:
    """Loss 1.4 -> 3e5 -> back to chance with dead ReLUs: was "a negative bias" (or, with
    F.relu, only spikes)."""
    args = ["--functional"] if functional else []
    report, _ = gradoc_run(tmp_path, "adam_lr3_blowup.py", *args)
    top = headline(report)
    assert top["kind"] == "loss_blowup"
    assert top["root_cause"].startswith("learning rate too high")
    assert top["details"]["peak_loss"] > 1e4
    assert "dead_units" in related(top)  # behind F.relu too: the layer before is watched
    assert any(f["apply"] == {"lr_scale": 0.1} for f in top["fixes"] if "apply" in f)
    assert all(f["severity"] == "info" for f in report["findings"][1:])


def test_a_gpt_at_1000x_its_learning_rate_is_not_healthy(tmp_path: Path) -> None:
    report, _ = gradoc_run(tmp_path, "char_gpt.py", "--lr-x", "1000")
    top = headline(report)
    assert top["kind"] == "loss_blowup" and top["step"] <= 5
    assert top["root_cause"].startswith("learning rate too high")


def test_a_gpt_initialised_with_std_1_starts_far_above_chance(tmp_path: Path) -> None:
    report, _ = gradoc_run(tmp_path, "char_gpt.py", "--init-std", "1.0")
    top = headline(report)
    assert top["kind"] == "poor_initialization" and top["step"] == 0
    assert top["layer"] == "lm_head"
    assert top["details"]["chance"] == pytest.approx(math.log(65))
    assert top["root_cause"].startswith("weights initialised too large")


def test_an_rnn_at_1000x_its_learning_rate_is_not_vanishing_gradients(tmp_path: Path) -> None:
    report, _ = gradoc_run(tmp_path, "char_rnn.py", "--lr-x", "1000")
    top = headline(report)
    assert top["kind"] == "loss_blowup"
    assert top["root_cause"].startswith("learning rate too high")
    serious = [f["kind"] for f in report["findings"] if f["severity"] != "info"]
    assert serious == ["loss_blowup"]  # vanishing gradients came after it: a consequence


def test_a_deep_linear_net_loses_its_gradient_to_the_init_not_to_activations(
    tmp_path: Path,
) -> None:
    """40 Linear layers and no activation: the immediate fix once said "switch sigmoid/tanh
    hidden activations to ReLU", for a model that has none."""
    report, _ = gradoc_run(tmp_path, "deep_linear_default_init.py")
    top = headline(report)
    assert top["kind"] == "vanishing_gradients" and top["step"] == 0
    assert top["root_cause_family"] == "initialization", top["root_cause"]
    # the run's own numbers: default init passes back ~1/sqrt(3) per layer, 40 layers
    init = top["hypotheses"][0]
    assert "0.577" in init["support"][0] and "0.577^40" in init["support"][0]
    immediate = [x["action"] for x in top["fixes"] if x["horizon"] == "immediate"]
    assert immediate and "xavier" in immediate[0]
    assert not any("activations to ReLU" in x["action"] for x in top["fixes"])
    against = {h["cause"]: h["against"] for h in top["hypotheses"]}
    assert against["dead ReLU units blocking the gradient"] == [
        "the model has no ReLU-family module"
    ]


def test_a_sigmoid_stack_at_a_preserving_init_blames_the_activation(tmp_path: Path) -> None:
    """The same depth of sigmoids with Xavier weights: the weights keep the gradient, the
    sigmoids (derivative <= 0.25) lose it; the swap is the immediate fix."""
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(12):
        lin = torch.nn.Linear(32, 32)
        torch.nn.init.xavier_uniform_(lin.weight)
        layers += [lin, torch.nn.Sigmoid()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradoc.watch(model, opt, out=tmp_path / "run") as run:
        for step in range(30):
            x = torch.randn(16, 32, generator=torch.Generator().manual_seed(step))
            loss = torch.nn.functional.cross_entropy(model(x), x[:, :4].argmax(1))
            opt.zero_grad()
            loss.backward()
            opt.step()
    report = json.loads((run.dir / "report.json").read_text())
    top = next(f for f in report["findings"] if f["kind"] == "vanishing_gradients")
    assert top["root_cause_family"] == "architecture", top["root_cause"]
    init = next(h for h in top["hypotheses"] if h["family"] == "initialization")
    assert any("loses at most 10x" in a for a in init["against"]), init
    assert top["fixes"][0]["horizon"] == "immediate"
    assert "switch the hidden Sigmoid activations to ReLU" in top["fixes"][0]["action"]


def test_adam_on_half_weights_is_its_eps_in_float16_not_the_learning_rate(tmp_path: Path) -> None:
    """Was "an optimizer update that wrote non-finite weights (learning rate too high)" at
    lr 1e-3, with "lower the learning rate by 10x" first and the NaN outputs of the ReLU
    reported as dead units."""
    report, stdout = gradoc_run(tmp_path, "half_precision_adam.py")
    top = headline(report)
    assert top["kind"] == "nonfinite" and top["origin"]["phase"] == "optimizer"
    assert top["root_cause_family"] == "precision", top["root_cause"]
    assert top["root_cause"].startswith("the optimizer's eps (1e-08) is 0 in float16")
    zeros = next(e for e in top["origin"]["evidence"] if e["signal"].startswith("exact zeros"))
    assert 0 < zeros["value"] <= zeros["of"]
    assert top["fixes"][0]["horizon"] == "immediate" and "float32" in top["fixes"][0]["action"]
    assert not any(x.get("apply", {}).get("lr_scale") for x in top["fixes"])
    assert "learning rate too high" in {r["cause"] for r in top["ruled_out"]}
    serious = [f["kind"] for f in report["findings"] if f["severity"] != "info"]
    assert serious == ["nonfinite"], serious  # NaN outputs are not dead units
    assert stdout.splitlines()[0].startswith("0 1.41")  # the user's own first loss


def test_an_eps_of_zero_is_a_numerics_root_cause(tmp_path: Path) -> None:
    """float32 with eps=0: a weight whose gradient is exactly 0 (a feature that is always
    0) gets 0/0 from Adam's first update."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=0.0)
    with gradoc.watch(model, opt, out=tmp_path / "run") as run:
        for _ in range(5):
            x = torch.randn(32, 8)
            x[:, 0] = 0.0  # no gradient ever reaches the first column of 0.weight
            loss = torch.nn.functional.cross_entropy(model(x), (x[:, 1] > 0).long())
            opt.zero_grad()
            loss.backward()
            opt.step()
    report = json.loads((run.dir / "report.json").read_text())
    top = headline(report)
    assert top["kind"] == "nonfinite" and top["root_cause_family"] == "numerics"
    assert top["root_cause"].startswith("the optimizer's eps (0) is 0 in float32")
    assert top["fixes"][0]["action"] == "give the optimizer an eps above 0 (1e-8)"


@pytest.mark.parametrize(
    ("script", "args"),
    [("char_gpt.py", []), ("char_rnn.py", []), ("actor_critic.py", [])],
)
def test_healthy_recipes_stay_healthy(tmp_path: Path, script: str, args: list[str]) -> None:
    """The actor-critic's loss is summed over episodes that lengthen: it rises 10x on a
    healthy run (61 "spikes" or a "divergence" before)."""
    report, _ = gradoc_run(tmp_path, script, *args)
    assert report["status"] == "healthy", [f["summary"] for f in report["findings"]]


# -- invariants a person would never accept ---------------------------------------------------
def _findings(**series: Any) -> list[Finding]:
    from gradoc.detect import synthetic
    from gradoc.findings import check_all

    h = synthetic(**series)
    return diagnose(h, check_all(h))


@pytest.mark.parametrize(
    "loss",
    [
        [1.0] * 20 + [150.0] + [1.0] * 30,  # 150x, once, and back
        [2.0, 1.8, 1.6] + [1.5 * 1.5**k for k in range(30)],  # climbing to 1e5
        [1.0] * 10 + [float("inf")] + [1.0] * 10,  # one non-finite loss
        [1.0] * 5 + [1e30] * 5 + [1.0] * 40,  # 1e30 for five steps
    ],
)
def test_a_loss_100x_above_its_start_or_non_finite_is_never_healthy(loss: list[float]) -> None:
    serious = [f for f in _findings(loss=loss) if f.severity in ("error", "warning")]
    assert serious, "a loss 100x above its start, or non-finite, was called healthy"


def test_a_non_finite_gradient_norm_is_never_healthy() -> None:
    grads = {"a.weight": [1.0] * 10 + [float("nan")] + [1.0] * 5}
    assert any(f.severity == "error" for f in _findings(loss=[1.0] * 16, grad_norms=grads))


def test_a_run_that_watched_no_step_says_so(tmp_path: Path) -> None:
    script = tmp_path / "noopt.py"  # computes, never trains: no step to watch
    script.write_text(
        "import torch\nx = torch.randn(3, 3)\nfor _ in range(5):\n    x = torch.tanh(x @ x)\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "gradoc", "run", "--out", str(tmp_path / "r"), str(script)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["status"] == "not_watched" and "optimizer" in report["not_watched"]
    assert "--check numerics" in report["not_watched"]  # and how to watch it anyway
    assert "healthy" not in done.stderr and "watched nothing" in done.stderr


def test_lr_is_never_the_root_when_updates_contradict_it_and_a_nan_is_located() -> None:
    """The update/weight ratios stay tiny, the loss "diverges" after the NaN only because
    the updates are dropped: the located op is the root, the divergence its consequence."""
    from gradoc.detect import synthetic
    from gradoc.findings import check_all
    from gradoc.store.reader import Event

    n = 60
    loss = [1.0 - 0.01 * i for i in range(15)] + [0.85 * 3] * (n - 15)
    h = synthetic(
        loss=loss,
        grad_norms={"fc.weight": [1.0] * 15 + [float("nan")] * (n - 15)},
        param_stats={"fc.weight": {"weight_norm": [10.0] * n, "update_norm": [1e-3] * n}},
    )
    origin = {
        "phase": "backward",
        "step": 15,
        "op": "SqrtBackward0",
        "module": None,
        "file": "train.py",
        "line": 18,
        "code": "dist = torch.sqrt(d)",
    }
    h.events.append(Event(15, 0.0, "nonfinite_origin", "", {"origin": origin}))
    stories = diagnose(h, check_all(h))
    top = next(f for f in stories if f.severity in ("error", "warning"))
    assert top.kind == "nonfinite" and "learning rate" not in (top.root_cause or "")
    assert all(f.kind == "nonfinite" for f in stories if f.severity != "info")


def test_a_plateau_after_a_blow_up_is_part_of_its_story() -> None:
    loss = [1.4, 1.5, 40.0, 900.0, 3000.0, 800.0, 60.0, 5.0] + [math.log(4)] * 150
    stories = _findings(loss=loss)
    top = next(f for f in stories if f.severity in ("error", "warning"))
    assert top.kind == "loss_blowup" and {"loss_plateau"} <= {r.kind for r in top.related}
    assert top.root_cause and top.root_cause.startswith("learning rate too high")


def test_a_version_1_log_without_samples_still_reads(tmp_path: Path) -> None:
    import sqlite3

    import torch

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradoc.watch(model, opt, out=tmp_path / "run"):
        for _ in range(5):
            opt.zero_grad()
            model(torch.randn(8, 4)).pow(2).mean().backward()
            opt.step()
    conn = sqlite3.connect(tmp_path / "run" / "run.db")
    conn.execute("ALTER TABLE steps DROP COLUMN samples")
    conn.execute("PRAGMA user_version=1")
    conn.commit()
    conn.close()
    log = gradoc.open_run(tmp_path / "run")
    assert log.version == 1 and log.num_steps == 5 and not log.scalar("samples").steps
    assert History.load(log).loss.steps == [0, 1, 2, 3, 4]


# -- calibration changes from the corpus (benchmarks/accuracy.py, calibration split) ---------
def _serious(h: Any) -> list[Finding]:
    from gradoc.findings import check_all

    return [f for f in diagnose(h, check_all(h)) if f.severity in ("error", "warning")]


# the loss of a healthy 100-step Adam MLP, batch 32 (calibration mlp:healthy:adam)
NOISY_HEALTHY = [1.37, 1.39, 1.34, 1.35, 1.35, 1.3, 1.36, 1.25, 1.23, 1.22, 1.2, 1.25, 1.12]
NOISY_HEALTHY += [1.07, 0.95, 0.95, 0.94, 1.02, 0.84, 0.84, 0.79, 0.62, 0.95, 0.52, 0.72, 0.76]
NOISY_HEALTHY += [0.92, 0.61, 0.49, 0.6, 0.73, 0.42, 0.55, 0.62, 0.39, 0.35, 0.54, 0.22, 0.43]
NOISY_HEALTHY += [0.27, 0.49, 0.54, 0.45, 0.38, 0.22, 0.45, 0.39, 0.34, 0.41, 0.57, 0.26, 0.27]
NOISY_HEALTHY += [0.31, 0.14, 0.38, 0.29, 0.46, 0.28, 0.09, 0.14, 0.19, 0.13, 0.19, 0.18, 0.37]
NOISY_HEALTHY += [0.22, 0.29, 0.28, 0.41, 0.23, 0.25, 0.27, 0.12, 0.46, 0.3, 0.51, 0.2, 0.18]
NOISY_HEALTHY += [0.14, 0.17, 0.22, 0.27, 0.15, 0.33, 0.13, 0.3, 0.11, 0.1, 0.17, 0.22, 0.28]
NOISY_HEALTHY += [0.33, 0.28, 0.26, 0.47, 0.29, 0.07, 0.35, 0.3, 0.27]


def test_a_noisy_healthy_loss_is_no_divergence() -> None:
    """Its 5-step median low (0.13) is an excursion: a later 0.28 was a "divergence"."""
    from gradoc.detect import synthetic

    assert not _serious(synthetic(loss=NOISY_HEALTHY))


def test_a_bad_batch_on_a_falling_loss_is_a_spike() -> None:
    """Against a 128-step median still high from the descent, 4.3 was no spike."""
    from gradoc.detect import synthetic

    loss = [3.0 * 0.95**i for i in range(45)] + [0.3] * 25 + [4.3] + [0.3] * 29
    (top,) = _serious(synthetic(loss=loss))
    assert (top.kind, top.step, top.root_cause_family) == ("loss_spike", 70, "data")


def test_a_nan_at_the_end_of_a_blow_up_is_the_learning_rate_not_the_op() -> None:
    """SGD at lr 50 on a transformer: 1.45, then 4e8, then NaN in a LayerNorm."""
    from gradoc.detect import synthetic
    from gradoc.store.reader import Event

    h = synthetic(
        loss=[1.45, 30.0, 2e4, 4e8, float("nan"), float("nan")],
        grad_norms={"enc.weight": [1.0, 40.0, 3e4, 5e8, float("nan"), float("nan")]},
    )
    origin = {"phase": "forward", "step": 4, "op": "aten.native_layer_norm.default"}
    origin |= {"module": "enc.norm1", "file": "train.py", "line": 9, "code": "h = enc(x)"}
    h.events.append(Event(4, 0.0, "nonfinite_origin", "", {"origin": origin}))
    top = _serious(h)[0]
    assert top.root_cause_family == "learning_rate", top.root_cause
    assert top.kind in ("loss_blowup", "loss_divergence", "exploding_gradients")
    assert "nonfinite" in {r.kind for r in top.related}  # the overflow is its consequence


def _ce(h: Any, classes: int) -> Any:
    h.meta = h.meta.updated(loss_fn={"node": "NllLossBackward0", "classes": classes})
    return h


def test_back_at_chance_after_a_blow_up_is_a_plateau_that_names_the_learning_rate() -> None:
    """Adam at lr 3 on a ResNet: 1.7, 3.6, then ln 4 for 90 steps ("improved": nothing)."""
    from gradoc.detect import synthetic

    loss = [1.69, 3.64, 2.83, 3.48, 3.04, 2.2] + [
        math.log(4) * (1 + 0.01 * (-1) ** i) for i in range(94)
    ]
    top = _serious(_ce(synthetic(loss=loss), 4))[0]
    assert top.kind == "loss_plateau" and Plateau.of(top.details).classes == 4
    assert top.root_cause_family == "learning_rate", top.root_cause
    assert any(f.apply == {"lr_scale": 0.1} for f in top.fixes)


def test_a_converged_fine_tune_is_no_plateau() -> None:
    from gradoc.detect import synthetic

    loss = [0.3 + 0.05 * ((i * 7) % 5 - 2) / 2 for i in range(100)]  # 0.25-0.35, flat
    assert not _serious(_ce(synthetic(loss=loss), 4))
    assert _serious(synthetic(loss=loss))  # no chance level known: a plateau it stays


def test_weights_that_start_at_zero_are_the_root_cause_of_a_stuck_run() -> None:
    from gradoc.detect import synthetic

    n = 120
    h = synthetic(
        loss=[math.log(4)] * n,
        grad_norms={"fc1.weight": [0.0] * n, "fc2.weight": [1e-3] * n},
        param_stats={
            "fc1.weight": {"weight_norm": [0.0] * n},
            "fc2.weight": {"weight_norm": [0.0] * n},
        },
    )
    top = _serious(_ce(h, 4))[0]
    assert top.root_cause_family == "initialization", top.root_cause
    assert top.root_cause and top.root_cause.startswith("weights initialised to zero")


class _Readout(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gain = torch.nn.Parameter(torch.ones(()))
        self.fc = torch.nn.Linear(8, 2)

    def forward(self, h: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        return self.fc(h * torch.sqrt(count * self.gain)[:, None])


class _Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Linear(4, 8)
        self.readout = _Readout()

    def forward(self, x: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        return self.readout(self.body(x), count)


def test_a_backward_nan_is_attributed_to_the_module_whose_forward_made_it(tmp_path: Path) -> None:
    """sqrt(0) in readout's forward, whose child fc ran after it: the node is readout's
    (fc's walk used to tag every node behind its output, the sqrt included)."""
    torch.manual_seed(0)
    model = _Model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradoc.watch(model, opt, out=tmp_path / "run"):
        for step in range(6):
            count = torch.full((16,), 3.0)
            if step == 3:
                count[0] = 0.0
            opt.zero_grad()
            model(torch.randn(16, 4), count).pow(2).mean().backward()
            opt.step()
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    origin = headline(report)["origin"]
    assert (origin["op"], origin["phase"], origin["module"]) == (
        "SqrtBackward0",
        "backward",
        "readout",
    )
