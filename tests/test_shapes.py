"""The diagnosis weighs the run's evidence: shapes that a fixed order of hypotheses got
wrong, each as a script of our own in tests/shapes/ run unchanged under ``gradoc run``.

- one corrupted batch: a spike whose first suspect is that batch, not the learning rate;
- a ReLU layer killed by a learning rate: the rate, not an initialisation never observed;
- ``zero_grad()`` removed: accumulating gradients, and the missing call as the cause;
- a model frozen by mistake: frozen parameters, not "labels carry no relation";
- LBFGS at lr 80: the learning rate;
- noisy losses that are healthy (batch 1, a policy gradient, one-weight regression, a
  one-network actor-critic whose gradient grows with its returns): no warning at all;
- a NaN at step 600 after a blow-up that came back by step 25: the NaN heads the report,
  not folded into the blow-up;
- two objectives judged by their own kind of training: a PPO-style actor and critic (each
  with its own Adam) and a GAN, healthy and broken;
- a policy that went certain within two updates (an actor-critic at 1000x its rate);
- a NaN located from the loss's autograd graph, without a re-run: a hand-written penalty's
  division, an advantage normalised without gradient, a program that wrote files.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import gradoc

SHAPES = Path(__file__).parent / "shapes"


def gradoc_run(tmp_path: Path, script: str, *args: str) -> dict[str, Any]:
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "gradoc", "run", "--out", str(out), str(SHAPES / script), *args],
        capture_output=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert (out / "report.json").exists(), done.stderr.decode()
    return json.loads((out / "report.json").read_text())


def serious(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["severity"] in ("error", "warning")]


@pytest.mark.parametrize(
    ("script", "kinds", "family"),
    [
        ("corrupted_batch.py", {"loss_spike"}, "data"),
        ("lr_jump_dead.py", {"dead_units", "loss_blowup", "exploding_gradients"}, "learning_rate"),
        ("no_zero_grad.py", {"accumulating_gradients"}, "loop"),
        ("frozen_gpt.py", {"frozen_parameters"}, "loop"),
        ("lbfgs_lr80.py", {"nonfinite", "loss_blowup"}, "learning_rate"),
    ],
)
def test_the_headline_and_its_root_cause(
    tmp_path: Path, script: str, kinds: set[str], family: str
) -> None:
    report = gradoc_run(tmp_path, script)
    top = serious(report)[0]
    assert top["kind"] in kinds, [f["summary"] for f in report["findings"]]
    assert top["root_cause_family"] == family, top["root_cause"]
    # the first hypothesis is the best-supported one, and it was seen in this run
    first = top["hypotheses"][0]
    assert first["support"], first
    assert first["score"] == max(h["score"] for h in top["hypotheses"])


def test_a_corrupted_batch_rules_out_the_learning_rate_with_adams_own_scale(
    tmp_path: Path,
) -> None:
    """Adam's first step moves every weight by about the learning rate: 0.02-0.03 of a
    small layer's norm at lr 3e-3 is no sign of a rate too high."""
    top = serious(gradoc_run(tmp_path, "corrupted_batch.py"))[0]
    lr = next(h for h in top["hypotheses"] if h["family"] == "learning_rate")
    assert not lr["support"], lr
    ratio = next(s for s in lr["signs"] if "large for Adam" in s["claim"])
    assert ratio["state"] != "seen" and ratio["value"] < 0.1, ratio


def test_a_frozen_model_folds_its_plateau_into_the_cause(tmp_path: Path) -> None:
    report = gradoc_run(tmp_path, "frozen_gpt.py")
    (top,) = serious(report)
    assert top["kind"] == "frozen_parameters"
    assert {r["kind"] for r in top["related"]} == {"loss_plateau"}
    assert top["details"]["share"] > 0.9


@pytest.mark.parametrize(
    "script",
    [
        "char_rnn_batch1.py",
        "ppo_healthy.py",
        "one_weight_regression.py",
        "actor_critic_one_optimizer.py",
    ],
)
def test_a_noisy_healthy_loss_raises_nothing(tmp_path: Path, script: str) -> None:
    report = gradoc_run(tmp_path, script)
    assert not serious(report), [f["summary"] for f in report["findings"]]


def test_a_late_nan_heads_the_report_apart_from_an_early_blowup(tmp_path: Path) -> None:
    report = gradoc_run(tmp_path, "late_nan_after_blowup.py")
    top, *rest = serious(report)
    assert (top["kind"], top["step"]) == ("nonfinite", 600), top["summary"]
    blowup = next(f for f in rest if f["kind"] == "loss_blowup")
    assert blowup["step"] < 10 and "nonfinite" not in {r["kind"] for r in blowup["related"]}


def objectives(report: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {o["name"]: (o["training"], o["role"]) for o in report["run"]["objectives"]}


def test_an_actor_and_a_critic_are_two_objectives_judged_as_reinforcement(tmp_path: Path) -> None:
    """The critic's loss grows with the returns (1 -> ~250) while the agent improves: no
    alarm, and each part is named as the program calls it."""
    report = gradoc_run(tmp_path, "ppo_actor_critic.py")
    assert not serious(report), [f["summary"] for f in report["findings"]]
    assert objectives(report) == {
        "actor": ("reinforcement", "policy"),
        "critic": ("reinforcement", "critic"),
    }
    critic = next(o for o in report["run"]["objectives"] if o["name"] == "critic")
    assert (
        critic["steps"] == report["run"]["steps"]
        and critic["loss_last"] > 50 * critic["loss_first"]
    )
    layers = {f["layer"] for f in report["findings"] if f["layer"]}
    assert not any(layer.startswith("sequential") for layer in layers), layers
    # the actor's entropy is read from its loss's graph: it grows certain as it learns
    actor = next(o for o in report["run"]["objectives"] if o["name"] == "actor")
    assert actor["entropy_first"] > 0.9 and 1e-3 < actor["entropy_last"] < 0.5, actor
    assert critic["entropy_first"] is None


def test_a_policy_certain_within_two_updates_has_collapsed(tmp_path: Path) -> None:
    """The one-network actor-critic at 1000x its learning rate: one action certain in every
    state from the second update on, episodes of one or two steps, and no gradient left to
    change it; its loss does not blow up, so only the entropy tells."""
    report = gradoc_run(tmp_path, "actor_critic_one_optimizer.py", "--lr", "3")
    collapse = next(f for f in serious(report) if f["kind"] == "policy_collapse")
    assert collapse["step"] <= 3 and collapse["root_cause_family"] == "learning_rate"
    assert collapse["details"]["before"] > 0.9 and collapse["details"]["late"] < 1e-6
    (o,) = report["run"]["objectives"]
    assert (o["role"], o["entropy_first"] > 0.9, o["entropy_last"] < 1e-6) == (
        "actor-critic",
        True,
        True,
    )


def test_a_one_sample_advantage_std_is_the_headline_nan(tmp_path: Path) -> None:
    report = gradoc_run(tmp_path, "ppo_actor_critic.py", "--one-sample")
    top = serious(report)[0]
    assert (top["kind"], top["step"]) == ("nonfinite", 80), top["summary"]
    assert top["root_cause_family"] == "numerics", top["root_cause"]
    origin = top["origin"]
    assert origin["phase"] == "forward" and origin["op"] == "std or div", origin
    assert "adv.std()" in origin["code"] and "already non-finite" in origin["note"], origin
    assert report["run"]["exit_code"] == 1


def test_a_healthy_gan_is_a_game_not_a_plateau(tmp_path: Path) -> None:
    report = gradoc_run(tmp_path, "gan.py")
    assert not serious(report), [f["summary"] for f in report["findings"]]
    assert objectives(report) == {
        "discriminator": ("adversarial", "discriminator"),
        "generator": ("adversarial", "generator"),
    }


def test_a_discriminator_at_100x_the_rate_wins_and_starves_the_generator(tmp_path: Path) -> None:
    report = gradoc_run(tmp_path, "gan.py", "--d-lr-x100")
    top = serious(report)[0]
    assert top["kind"] == "adversarial_imbalance", [f["summary"] for f in report["findings"]]
    assert top["objective"] == "generator" and top["root_cause_family"] == "learning_rate"
    assert "100x" in top["root_cause"], top["root_cause"]


def test_autograd_grad_twice_an_iteration_is_one_step(tmp_path: Path) -> None:
    """A data term's gradient and a penalty's, each by ``torch.autograd.grad``: 200
    iterations are 200 steps, the NaN is at iteration 150, and the hand-written update is
    not "tiny" (it was measured between the two calls when each call was a step)."""
    report = gradoc_run(tmp_path, "grad_twice.py")
    assert report["run"]["steps"] == 200
    # the step's loss is the data term plus the penalty (two terms of one iteration), not
    # their mean as if each were a micro-batch: iteration 0 recomputed here
    torch.manual_seed(0)
    w, true_w = torch.randn(8, 4), torch.randn(8, 4)
    x = torch.randn(32, 8)
    first = ((x @ w - x @ true_w) ** 2).mean() + 1e-3 * (w / w.norm(dim=1, keepdim=True)).sum()
    logged = gradoc.open_run(tmp_path / "run").scalar("loss").values[0]
    assert logged == pytest.approx(float(first), rel=1e-5)
    top = serious(report)[0]
    assert (top["kind"], top["step"]) == ("nonfinite", 150), top["summary"]
    assert "tiny_updates" not in {f["kind"] for f in serious(report)}
    # the penalty's div, read from its graph: not "the optimizer pass" (the hand-written
    # update had already written the NaN gradient into the weights when the step was read)
    origin = top["origin"]
    assert (origin["phase"], origin["op"], origin["line"]) == ("forward", "div", 25), origin
    assert top["root_cause_family"] == "numerics", top["root_cause"]


def test_a_nan_in_a_program_that_wrote_files_is_located_without_a_rerun(tmp_path: Path) -> None:
    """The program wrote its CSV log, so gradoc may not re-run it: the cosine's division
    by a norm of 0 is named from the loss's autograd graph, in the run itself."""
    report = gradoc_run(tmp_path, "cosine_writes_logs.py")
    assert (tmp_path / "logs" / "metrics.csv").exists()
    top = serious(report)[0]
    assert (top["kind"], top["step"]) == ("nonfinite", 60), top["summary"]
    origin = top["origin"]
    assert (origin["phase"], origin["op"], origin["line"]) == ("forward", "div", 39), origin
    assert "without a replay" in origin["note"] and "replayed" not in origin["note"]
    zeros = next(e for e in origin["evidence"] if e["signal"].startswith("values of the divisor"))
    assert (zeros["value"], zeros["of"]) == (1, 32)
    assert top["root_cause_family"] == "numerics", top["root_cause"]
    (tmp_path / "healthy").mkdir()
    healthy = gradoc_run(tmp_path / "healthy", "cosine_writes_logs.py", "--healthy")
    assert not serious(healthy), [f["summary"] for f in healthy["findings"]]


# -- what the program set up, read as evidence --------------------------------------------


@pytest.mark.parametrize(
    ("script", "broken", "healthy", "kind", "family", "words"),
    [
        ("head_only_optimizer.py", (), ("--all",), "frozen_parameters", "loop", "left out"),
        ("eval_left_on.py", (), ("--train-mode",), "eval_mode", "loop", "model.eval()"),
        ("vae_kl_sign.py", ("--flip",), (), "loss_unbounded", "loop", "sign flipped"),
        ("softmax_into_ce.py", (), ("--logits",), "loss_on_probabilities", "architecture", "ends"),
        # Hugging Face conventions, seen in the batch by default (no --check padding)
        ("hf_bert_no_mask.py", (), ("--mask",), "padding_leak", "masking", "attention_mask"),
        (
            "hf_gpt2_labels_pads.py",
            (),
            ("--ignore-pads",),
            "loss_includes_padding",
            "masking",
            "-100",
        ),
        # an Adam-family rate against the weights' own scale, whatever the clip did
        ("adamw_lr_x100.py", ("--lr-x100",), (), "large_updates", "learning_rate", "learning rate"),
    ],
)
def test_the_set_up_is_the_headline_and_healthy_runs_raise_nothing(
    tmp_path: Path,
    script: str,
    broken: tuple[str, ...],
    healthy: tuple[str, ...],
    kind: str,
    family: str,
    words: str,
) -> None:
    """A model half left out of its optimizer, BatchNorm trained in eval(), a KL term
    subtracted, softmax outputs into cross_entropy, pads fed to BERT with no mask, GPT-2
    labels that score pads, AdamW at lr 0.1 under a clip: each is the story's head, with its
    set-up as the root cause (not the initialisation, nor the rate where the rate is not
    it), and the same program set up right raises no warning."""
    report = gradoc_run(tmp_path, script, *broken)
    top = serious(report)[0]
    assert top["kind"] == kind, [f["summary"] for f in serious(report)]
    assert top["root_cause_family"] == family and words in top["root_cause"], top["root_cause"]
    (tmp_path / "ok").mkdir()
    fine = gradoc_run(tmp_path / "ok", script, *healthy)
    assert not serious(fine), [f["summary"] for f in fine["findings"]]


def test_an_adam_rate_is_read_against_the_weights_scale_at_every_step(tmp_path: Path) -> None:
    """Under a warm-up the weights inflate as fast as the rate grows (0.69 of their RMS at
    step 10, 0.25 at the peak): the rate against the scale they were built at says it."""
    from gradoc.detect.history import History
    from gradoc.findings.large_updates import AdamRate, _allowed
    from gradoc.store.reader import RunLog

    gradoc_run(tmp_path, "adamw_lr_x100.py", "--lr-x100")
    (found,) = _allowed(History.load(RunLog(tmp_path / "run" / "run.db")))
    d = AdamRate.of(found.details)
    assert d.lr == pytest.approx(0.1) and d.weight_rms == pytest.approx(0.02, rel=0.05)
    assert d.inflated is not None and d.inflated > 10 and found.step < 10
