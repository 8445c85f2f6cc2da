"""Harm before alarm, kind by kind (issue 46, item 2): every kind states the harm its warnings
and errors need, the findings reference shows it, and a rule that reads a statistic, or an
event that was over within a few steps, stays information on a run whose objective improved
clearly. Each case here builds the same history twice: once where the loss does not improve
(the warning or error stands) and once where it halves (information, with the reason)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import pytest

from gradoc.detect import signals
from gradoc.detect.finding import Finding
from gradoc.detect.history import History, synthetic
from gradoc.diagnose import diagnose
from gradoc.findings import KINDS, REGISTRY, check_all
from gradoc.findings.frozen_parameters import Frozen
from gradoc.report import reference

N = 40
FLAT = [1.0] * N
FALLING = [1.0 - 0.8 * i / (N - 1) for i in range(N)]  # 1.0 to 0.2: halved, and more


def _dead(loss: Sequence[float]) -> History:
    dead = [0.0] * 80 + [0.3] * 20
    steps = list(range(0, N, 10))
    return synthetic(
        loss=loss,
        acts={"relu": {"zero_frac": [0.9] * len(steps)}},
        act_steps=steps,
        module_types={"relu": "ReLU"},
        units={"relu": {s: ([0.5] * 100 if s == 0 else dead) for s in steps}},
    )


def _saturated(loss: Sequence[float]) -> History:
    return synthetic(
        loss=loss, acts={"tanh": {"sat_frac": [0.2, 0.7, 0.8, 0.9]}}, act_steps=[0, 10, 20, 30]
    )


def _vanishing(loss: Sequence[float]) -> History:
    grads = {"l0.weight": [1e-7] * N, "l1.weight": [1e-4] * N, "l2.weight": [0.5] * N}
    return synthetic(loss=loss, grad_norms=grads)


def _tiny(loss: Sequence[float]) -> History:
    return synthetic(
        loss=loss,
        grad_norms={"l0.weight": [0.1] * N},
        param_stats={"l0.weight": {"weight_norm": [1.0] * N, "update_norm": [1e-10] * N}},
    )


def _exploding_at_step_0(loss: Sequence[float]) -> History:
    """The first gradient 1e4x a weight that starts near 0, then ordinary (a tutorial's
    ``nn.Linear(1, 1)`` on unnormalised targets)."""
    return synthetic(
        loss=[100 * v for v in loss],
        grad_norms={"fc.weight": [1e2] + [1.0] * (N - 1)},
        param_stats={"fc.weight": {"weight_norm": [1e-2] + [3.0] * (N - 1)}},
    )


def _blowup_at_start(loss: Sequence[float]) -> History:
    """A loss that jumps 10x at step 1 and is back by step 4, then goes on as ``loss``."""
    return synthetic(loss=[loss[0], 10.0, 9.0, 8.0, *(v * 0.9 for v in loss[4:])])


STATISTICS: list[tuple[str, Callable[[Sequence[float]], History]]] = [
    ("dead_units", _dead),
    ("saturated_units", _saturated),
    ("vanishing_gradients", _vanishing),
    ("tiny_updates", _tiny),
    ("exploding_gradients", _exploding_at_step_0),
    ("loss_blowup", _blowup_at_start),
]


def _one(h: History, kind: str) -> Finding:
    (f,) = [f for f in check_all(h) if f.kind == kind]
    return f


@pytest.mark.parametrize(("kind", "build"), STATISTICS, ids=[k for k, _ in STATISTICS])
def test_a_statistic_or_a_transient_on_an_improving_objective_is_information(
    kind: str, build: Callable[[Sequence[float]], History]
) -> None:
    stands = _one(build(FLAT), kind)
    assert stands.severity in ("warning", "error"), stands.summary
    better = _one(build(FALLING), kind)
    assert better.severity == "info", better.summary
    assert "(information: " in better.summary


def test_units_that_died_early_in_a_loss_that_went_on_falling_are_information() -> None:
    """The VAE's shape: the loss fell fast before the units died (so the run's loss did not
    halve from its first tenth), then on by a fifth and more: they did not stop it."""
    early = [10.0, 9.0, 8.5, 8.2]  # its first tenth: a median of 8.75
    after = [8.0 - 3.6 * i / (N - 5) for i in range(N - 4)]  # 8.0 to 4.4 from step 4 on
    h = _dead(early + after)
    assert signals.loss_improved(h) is None  # not halved from its first tenth
    f = _one(h, "dead_units")  # found dead at step 10 (7.38), the loss then fell to 4.86
    assert f.severity == "info", f.summary
    assert "the loss still fell from 7.38 at step 10 to 4.86" in f.summary
    stalled = _one(_dead(early + [8.0] * (N - 4)), "dead_units")
    assert stalled.severity == "warning"


def test_an_exploding_gradient_that_lasts_keeps_its_error_on_an_improving_loss() -> None:
    h = synthetic(
        loss=FALLING,
        grad_norms={"fc.weight": [1e2] * N},
        param_stats={"fc.weight": {"weight_norm": [1e-2] * N}},
    )
    assert _one(h, "exploding_gradients").severity == "error"


def test_a_blowup_that_ends_where_it_began_keeps_its_error() -> None:
    """minGPT's adder at lr x1000: 2.3 to 34, back in a few steps to ~2.1, no better."""
    h = synthetic(loss=[2.3, 34.0, 30.0, 20.0, *([2.1] * (N - 4))])
    assert _one(h, "loss_blowup").severity == "error"


def test_every_kind_states_its_harm_and_the_reference_shows_it() -> None:
    page = reference.reference()
    for kind in KINDS:
        assert kind.harm.strip(), f"{kind.name} states no harm"
        assert f"**Harm** {kind.harm}" in page, kind.name
    assert set(REGISTRY) == {k.name for k in KINDS}


def test_a_left_out_finding_counts_its_tensors_alike_everywhere() -> None:
    """98 tensors left out, 20 of them named: every sentence says 98."""
    names = [f"block{i}.weight" for i in range(20)]
    f = Finding(
        kind="frozen_parameters",
        severity="warning",
        step=0,
        layer=None,
        summary="parameters left out of the optimizer: 98 tensors",
        details=Frozen(0.6, names, None, False, left_out=True, tensors=98),
    )
    [story] = diagnose(synthetic(loss=FLAT), [f])
    claims = [s.claim for h in story.hypotheses for s in h.signs]
    assert any(c.startswith("98 tensors") for c in claims), claims
    assert not any("20 tensors" in c for c in claims), claims


HARM_IS_READ = {
    # the rule reads harm itself: the mechanism seen directly
    "accumulating_gradients": "mechanism",
    "eval_mode": "mechanism",
    "zero_clip": "mechanism",
    "game_stopped": "mechanism",
    "policy_collapse": "mechanism",
    "loss_on_probabilities": "mechanism",
    "loss_includes_padding": "mechanism",
    "padding_leak": "mechanism",
    "fp16_overflow": "mechanism",
    "fp16_underflow": "mechanism",
    "nonfinite": "mechanism",
    "frozen_parameters": "mechanism",
    "weight_decay_dominates": "mechanism",
    "adam_epsilon": "mechanism",
    # the rule reads the loss itself
    "loss_divergence": "loss",
    "loss_plateau": "loss",
    "loss_spike": "loss",
    "loss_unbounded": "loss",
    "adversarial_imbalance": "loss",
    "poor_initialization": "loss",
    # the program's own measure of the run (a validation metric, a return) read directly
    "measure_worsened": "measure",
    # a structure seen in the graph: a penalty made and never backpropagated
    "critic_unconstrained": "mechanism",
    # a setting whose size no healthy run shows
    "large_updates": "setting",
    # a statistic beyond what a healthy run shows, with its source
    "attention_logit_growth": "statistic beyond healthy",
    "output_logit_divergence": "statistic beyond healthy",
    # never more than information about training
    "length_anomaly": "information",
    "padding_waste": "information",
    "log_incomplete": "information",
    # what gradoc did not watch (its own failure, a loss it could not read): a warning that
    # says so, never a verdict on the training
    "monitoring_stopped": "unwatched",
    "loss_unread": "unwatched",
}
"""How each kind that is not in :data:`STATISTICS` reads its harm: a new kind must say which,
or have a statistic case above."""


def test_every_kind_reads_harm_or_stays_information_without_it() -> None:
    covered = {k for k, _ in STATISTICS}
    assert covered.isdisjoint(HARM_IS_READ)
    assert covered | set(HARM_IS_READ) == set(REGISTRY), sorted(
        set(REGISTRY) - covered - set(HARM_IS_READ)
    )
    for name, how in HARM_IS_READ.items():
        harm = REGISTRY[name].harm
        if how == "mechanism":
            assert harm.startswith(("The mechanism itself", "Any NaN", "Parameters")), name
        elif how == "loss":
            assert "loss" in harm, name
        elif how == "measure":
            assert "the program's own measure" in harm, name


def test_a_noisy_one_sample_loss_that_started_low_by_luck_is_no_blowup() -> None:
    """One sample a step: a squared error of one prediction is a scaled chi-square, scattered
    over two orders of magnitude (an ordinary excursion of 10x and more), and one of the first
    three is lucky (0.0005 against a level of 0.05). The same series with a real 1000x blow-up
    is still one (its onset, on this noise, is dated early: the peak is the blow-up's)."""
    rng = random.Random(0)
    loss = [0.1 * rng.gauss(0, 1) ** 2 for _ in range(300)]
    loss[1] = 0.0005
    kind = REGISTRY["loss_blowup"]
    assert kind.check(synthetic(loss=loss)) == []
    blown = [*loss[:150], *(v * 1000 for v in loss[150:])]
    (found,) = kind.check(synthetic(loss=blown))
    assert found.severity == "error" and found.details.to_json()["peak_step"] >= 150
