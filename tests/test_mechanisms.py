"""The same mechanisms written another way (issue 46): programs of our own in
tests/mechanisms/, spelled unlike the shapes the rules were first written for, each run
unchanged under ``gradoc run``. A broken program gets the right headline and root cause; its
healthy twin (or a healthy program whose statistics alone look alarming) gets no warning.

- a tutorial's ``nn.Linear(1, 1)`` on unnormalised prices: a first gradient 6.8e7x its weight
  that the first updates corrected, and a Siamese network whose loss jumps for a few steps at
  start-up: information, not alarms;
- a PPO critic whose squared error is written by hand (tests/shapes/ppo_actor_critic.py
  ``--critic-by-hand``): a critic, judged as reinforcement;
- ``clip_grad_norm_(params, 0.0)``: zero_clip, and nothing folded under "learning rate";
- weight decay 2.0 with SGD: the loss pinned at chance, root cause the decay;
- a 5,000-word model starting 2.8 nats above chance (1.32x): poor_initialization;
- ``nll_loss`` on a softmax's output: loss_on_probabilities;
- a discriminator at 1,000x its generator's rate whose units all die: the game stopped (the
  generator gets no gradient), root cause the discriminator's rate;
- a warm-up to a peak rate 100x too high: the learning rate, its tiny first updates no
  evidence against it;
- a character MLP of raw tensors whose softmax and cross-entropy are written out and whose
  output layer starts unscaled: poor_initialization, read against ln 27;
- a generator whose optimizer was given the discriminator's parameters: the generator is
  watched all the same (a loss trains through it), and named as left out of every optimizer;
- a fine-tune whose freeze loop also froze the new head, the only thing its optimizer holds:
  the optimizer trains nothing;
- a DCGAN whose loop previews its generator in eval() after the first batch and never puts it
  back: BatchNorm statistics that counted one batch are still mostly their defaults.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from gradoc.collect.graph.losses import kind
from tests import test_shapes as shapes
from tests.test_shapes import serious

MECHANISMS = Path(__file__).parent / "mechanisms"


def gradoc_run(tmp_path: Path, script: str, *args: str) -> dict[str, Any]:
    """``gradoc run`` of a program in tests/mechanisms/ (or a path), its report.json."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    return shapes.gradoc_run(tmp_path, str(MECHANISMS / script), *args)


@pytest.mark.parametrize(
    ("script", "kind"),
    [("linreg_prices.py", "exploding_gradients"), ("siamese_startup.py", "dead_units")],
)
def test_what_did_no_harm_is_information_with_the_reason(
    tmp_path: Path, script: str, kind: str
) -> None:
    report = gradoc_run(tmp_path, script)
    assert not serious(report), [f["summary"] for f in serious(report)]
    assert report["status"] == "healthy"
    (seen,) = [f for f in report["findings"] if f["kind"] == kind]
    assert "(information: " in seen["summary"], seen["summary"]


def test_a_critic_whose_loss_is_written_by_hand_is_a_critic(tmp_path: Path) -> None:
    report = gradoc_run(tmp_path, str(shapes.SHAPES / "ppo_actor_critic.py"), "--critic-by-hand")
    roles = {o["name"]: (o["training"], o["role"]) for o in report["run"]["objectives"]}
    assert roles["critic"] == ("reinforcement", "critic"), roles
    assert not serious(report), [f["summary"] for f in serious(report)]


@pytest.mark.parametrize(
    ("script", "broken", "healthy", "kind", "family"),
    [
        ("clip_zero.py", (), ("--clip", "1"), "zero_clip", "loop"),
        ("decay_pinned.py", (), ("--decay", "2e-4"), "loss_blowup", "regularization"),
        ("wide_vocab_init.py", (), ("--init-std", "0.02"), "poor_initialization", None),
        ("nll_on_softmax.py", (), ("--log",), "loss_on_probabilities", "architecture"),
        ("gan_optimizer_typo.py", (), ("--fixed",), "frozen_parameters", "loop"),
        ("gan_stopped_game.py", (), ("--d-lr", "5e-3"), "game_stopped", "learning_rate"),
        ("warmup_peak_too_high.py", (), ("--peak", "3e-3"), "loss_divergence", "learning_rate"),
        ("char_mlp_by_hand.py", (), ("--scaled",), "poor_initialization", "initialization"),
        ("dcgan_preview_eval.py", (), ("--restore",), "eval_mode", "loop"),
    ],
)
def test_the_mechanism_is_the_headline_and_its_fix_is_healthy(
    tmp_path: Path,
    script: str,
    broken: tuple[str, ...],
    healthy: tuple[str, ...],
    kind: str,
    family: str | None,
) -> None:
    report = gradoc_run(tmp_path / "broken", script, *broken)
    top = serious(report)[0]
    assert top["kind"] == kind, [f["summary"] for f in report["findings"]]
    if family is not None:
        assert top["root_cause_family"] == family, top["root_cause"]
    fine = gradoc_run(tmp_path / "fine", script, *healthy)
    assert not serious(fine), [f["summary"] for f in serious(fine)]


def test_a_clip_of_zero_rules_out_a_learning_rate_too_low(tmp_path: Path) -> None:
    report = gradoc_run(tmp_path, "clip_zero.py")
    top = serious(report)[0]
    assert len(serious(report)) == 1, [f["summary"] for f in serious(report)]
    assert "tiny_updates" in {r["kind"] for r in top["related"]}
    assert any("learning rate" in r["cause"] for r in top["ruled_out"]), top["ruled_out"]


def test_a_model_no_optimizer_holds_is_watched_and_named(tmp_path: Path) -> None:
    report = gradoc_run(tmp_path, "gan_optimizer_typo.py")
    top = serious(report)[0]
    assert "no optimizer holds any parameter of netg" in top["summary"], top["summary"]
    assert top["root_cause"].startswith("netg left out of every optimizer"), top["root_cause"]


def test_an_optimizer_that_holds_only_frozen_parameters_trains_nothing(tmp_path: Path) -> None:
    report = gradoc_run(tmp_path / "broken", "head_frozen_too.py")
    top = serious(report)[0]
    assert (top["kind"], top["severity"]) == ("frozen_parameters", "error"), top["summary"]
    assert "trains nothing" in top["summary"] and "fc.weight" in top["summary"]
    assert top["root_cause_family"] == "loop"
    fine = gradoc_run(tmp_path / "fine", "head_frozen_too.py", "--order", "right")
    assert not serious(fine), [f["summary"] for f in serious(fine)]


def _spellings() -> list[tuple[str, torch.Tensor, dict[str, Any]]]:
    torch.manual_seed(0)
    x = torch.randn(8, 5, requires_grad=True)
    y, t = torch.randint(0, 5, (8,)), torch.randint(0, 2, (8,)).float()
    target, p = torch.randn(8), torch.sigmoid(x[:, 0])
    counts = x.exp()
    prob = counts / counts.sum(1, keepdims=True)
    mse = {"fn": "mse_loss", "by_hand": True}
    ce5 = {"fn": "cross_entropy", "classes": 5, "by_hand": True}
    return [
        ("pow", (x[:, 0] - target).pow(2).mean(), mse),
        ("square", torch.square(target - x[:, 0]).sum(), mse),
        ("product", ((x[:, 0] - target) * (x[:, 0] - target)).mean(), mse),
        ("half", 0.5 * ((target - x[:, 0]) ** 2).mean(), mse),
        ("abs", (x[:, 0] - target).abs().mean(), {"fn": "l1_loss", "by_hand": True}),
        ("log_softmax picked", -F.log_softmax(x, 1)[range(8), y].mean(), ce5),
        ("gathered", -(x.log_softmax(-1).gather(1, y[:, None])).mean(), ce5),
        ("softmax written out", -prob[torch.arange(8), y].log().mean(), ce5),
        ("binary", -(t * torch.log(p) + (1 - t) * torch.log(1 - p)).mean(), {"classes": 2}),
        ("summed: no chance level", -F.log_softmax(x, 1)[range(8), y].sum(), {"fn": None}),
        ("cubed: no regression", (x[:, 0] - target).pow(3).mean(), {"fn": None}),
        ("a product of two inputs", (x[:, 0] * target).mean(), {"fn": None}),
    ]


@pytest.mark.parametrize(("spelling", "loss", "read"), _spellings(), ids=lambda v: str(v)[:30])
def test_a_loss_is_read_from_what_it_computes(
    spelling: str, loss: torch.Tensor, read: dict[str, Any]
) -> None:
    """A squared error, an absolute one, a cross-entropy: however each is written."""
    said = kind(loss.grad_fn)
    assert {k: said.get(k) for k in read} == read, (spelling, said)


def test_another_models_optimizer_alive_in_the_process_is_not_this_runs(tmp_path: Path) -> None:
    """An optimizer of another model, alive in the same process and never used (a test's
    leftover, an EMA's), holds parameters with no gradient: it is not this run's optimizer
    training nothing (a flaky false error in CI before the set-up check read only the run's)."""
    import json

    import torch.nn as nn

    import gradoc

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    with gradoc.watch(model, opt, out=tmp_path / "run") as run:
        stale = torch.optim.SGD(nn.Linear(3, 3).parameters(), lr=0.1)  # noqa: F841
        for _ in range(120):
            x = torch.randn(32, 8)
            loss = F.cross_entropy(model(x), (x[:, 0] > 0).long())
            opt.zero_grad()
            loss.backward()
            opt.step()
    report = json.loads((run.dir / "report.json").read_text())
    assert not serious(report), [f["summary"] for f in serious(report)]


@pytest.mark.parametrize(
    ("batches", "momentum", "fresh"),
    [
        (0, 0.1, True),
        (1, 0.1, True),
        (6, 0.1, True),
        (7, 0.1, False),
        (100, 0.1, False),
        (1, 0.01, True),
        (0, None, True),
        (1, None, False),
    ],
)
def test_a_batchnorm_that_counted_a_few_batches_learnt_next_to_nothing(
    batches: int, momentum: float | None, fresh: bool
) -> None:
    """Its defaults weigh (1 - momentum)^n of its running statistics: more than half, and in
    eval() it normalises by a mean of 0 and a variance of 1 all but unchanged."""
    import torch.nn as nn

    from gradoc.collect.probes.setup import _fresh

    norm = nn.BatchNorm1d(4, momentum=momentum)
    for _ in range(batches):
        norm(torch.randn(16, 4) * 5 + 3)
    assert _fresh(norm) is fresh


def test_a_loss_the_decay_holds_at_chance_says_nothing_of_the_learning_rate(
    tmp_path: Path,
) -> None:
    """Weights a decay of 2 pulled to 0 predict nothing: that the loss ends at chance, and
    never gets below where it went, is the decay's doing, not a sign of a rate too high."""
    report = gradoc_run(tmp_path, "decay_pinned.py")
    top = serious(report)[0]
    (rate,) = [h for h in top["hypotheses"] if h["family"] == "learning_rate"]
    assert rate["likelihood"] == "low", rate
    said = " ".join(rate["support"])
    assert "chance level" not in said and "never got below" not in said, said
