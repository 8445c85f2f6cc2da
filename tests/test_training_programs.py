"""Our own RL, GAN and supervised programs (``tests/training/``), each run unchanged under
``gradoc run`` as a user runs it: the kind of training read from each objective's graph and
mechanics, no warning or error on a healthy run, and each harmed run found with its cause and,
where the program logs one, the harm in its own measure.

The agents learn a corridor of our own (``_corridor.py``, a gymnasium environment made
directly, as hand-written RL code makes its own): their episode returns are read from its
``step`` with no change to the program."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gradoc.store import open_run
from tests.test_unseen import gradoc_run

PROGRAMS = Path(__file__).parent / "training"


def _run(tmp_path: Path, script: str, *args: str) -> tuple[dict[str, Any], Path]:
    report, _ = gradoc_run(tmp_path, str(PROGRAMS / script), *args)  # an absolute path
    return report, tmp_path / "run"


def _kinds(report: dict[str, Any]) -> list[tuple[str, str]]:
    return [(o["training"], o["role"]) for o in report["run"]["objectives"]]


def _loud(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["severity"] in ("warning", "error")]


HEALTHY = [
    ("dqn_target.py", [("reinforcement", "value")], "outputs picked at the actions taken"),
    (
        "ppo_clip.py",
        [("reinforcement", "policy"), ("reinforcement", "critic")],
        "exp(logp - logp_old), clipped,",
    ),
    ("a2c_shared.py", [("reinforcement", "actor-critic")], "log-probabilities of the actions"),
    ("sb3_dqn.py", [("reinforcement", "value")], "Huber regression"),
    (
        "wgan_gp.py",
        [("adversarial", "discriminator"), ("adversarial", "generator")],
        "with a gradient penalty",
    ),
    ("gan_ring.py", [("adversarial", "discriminator"), ("adversarial", "generator")], ""),
    # half of a ReLU layer inactive on a 1-D input, the NLL falling: no warning
    ("mdn_fit.py", [("supervised", "loss")], ""),
]


@pytest.mark.parametrize(("script", "kinds", "evidence"), HEALTHY, ids=[h[0] for h in HEALTHY])
def test_a_healthy_agent_or_game_is_recognised_and_not_warned(
    tmp_path: Path, script: str, kinds: list[tuple[str, str]], evidence: str
) -> None:
    report, out = _run(tmp_path, script)
    assert _kinds(report) == kinds
    whys = " ".join(o["why"] for o in report["run"]["objectives"])
    assert evidence in whys, whys
    assert not _loud(report), [f["summary"] for f in _loud(report)]
    if script.startswith(
        ("dqn", "ppo", "a2c", "sb3")
    ):  # the agents' returns are read where the program keeps them
        returns = open_run(out).metric("episode/return")
        assert len(returns) > 50
        assert max(returns.values) == pytest.approx(0.9)


def test_dqn_at_1000x_its_rate_is_found_in_its_return(tmp_path: Path) -> None:
    report, _ = _run(tmp_path, "dqn_target.py", "--lr-scale", "1000")
    assert _kinds(report) == [("reinforcement", "value (return fell)")]
    loud = {f["kind"]: f for f in _loud(report)}
    worse = loud["measure_worsened"]
    assert "episode/return fell from" in worse["summary"]
    # the value loss's blow-up is judged now that the return fell with it, and its cause named
    blowup = loud["loss_blowup"]
    assert blowup["root_cause_family"] == "learning_rate", blowup["root_cause"]
    said = [e for e in blowup["evidence"] if e["signal"] == "the program's own measure"]
    assert said and "episode/return" in said[0]["value"]


def test_ppo_with_its_gradients_clipped_to_zero_says_the_return_never_moved(
    tmp_path: Path,
) -> None:
    report, _ = _run(tmp_path, "ppo_clip.py", "--grad-clip", "0")
    top = _loud(report)[0]
    assert top["kind"] == "zero_clip"
    said = [e["value"] for e in top["evidence"] if e["signal"] == "the program's own measure"]
    assert said and "episode/return stayed about" in said[0]


def test_an_entropy_bonus_of_the_wrong_sign_collapses_the_policy(tmp_path: Path) -> None:
    report, _ = _run(tmp_path, "a2c_shared.py", "--ent-coef", "-2")
    loud = _loud(report)
    assert [f["kind"] for f in loud] == ["policy_collapse"]
    assert "episode/return stayed about" in loud[0]["summary"]
    assert "wrong sign" in loud[0]["root_cause"]


def test_a_gradient_penalty_left_out_of_backward_is_named_at_its_line(tmp_path: Path) -> None:
    report, _ = _run(tmp_path, "wgan_gp.py", "--no-penalty")
    loud = _loud(report)
    assert [f["kind"] for f in loud] == ["critic_unconstrained"]
    line = next(
        i
        for i, text in enumerate((PROGRAMS / "wgan_gp.py").read_text().splitlines(), 1)
        if "autograd.grad(" in text
    )
    assert f"wgan_gp.py:{line} never reaches backward()" in loud[0]["summary"]
    assert loud[0]["severity"] == "error"


def test_a_discriminator_at_1000x_its_rate_is_found(tmp_path: Path) -> None:
    report, _ = _run(tmp_path, "gan_ring.py", "--d-lr-scale", "1000")
    loud = _loud(report)
    assert loud, "no finding"
    assert loud[0]["root_cause_family"] == "learning_rate", loud[0]["root_cause"]


def test_overfitting_is_told_from_the_validation_loss_the_program_logs(tmp_path: Path) -> None:
    report, _ = _run(tmp_path, "overfit_val.py")
    loud = _loud(report)
    assert [f["kind"] for f in loud] == ["measure_worsened"]
    assert "val/loss rose from" in loud[0]["summary"]
    assert loud[0]["root_cause_family"] == "regularization"


def test_an_unstable_regression_is_found_with_its_rate(tmp_path: Path) -> None:
    report, _ = _run(tmp_path, "unstable_sgd.py")
    loud = _loud(report)
    assert loud[0]["kind"] in ("loss_divergence", "nonfinite", "loss_blowup")
    assert any(f["root_cause_family"] == "learning_rate" for f in loud)
