"""Detectors on synthetic histories: no model, just the numbers a run would record."""

from __future__ import annotations

import math

import pytest

from gradoc.detect import synthetic
from gradoc.findings import REGISTRY, check_all
from gradoc.findings.large_updates import AdamRate
from gradoc.store.meta import RunMeta
from gradoc.store.reader import Event

NAN, INF = math.nan, math.inf


def kinds(h: object) -> list[str]:
    return [f.kind for f in check_all(h)]  # type: ignore[arg-type]


def smooth_loss(n: int, start: float = 2.0, end: float = 0.5) -> list[float]:
    return [end + (start - end) * math.exp(-i / (n / 4)) + 0.01 * math.sin(i) for i in range(n)]


# -- edge cases every detector must survive --------------------------------------------------
EDGE_CASES = {
    "empty": synthetic(),
    "single step": synthetic(loss=[1.0], grad_norms={"a.weight": [0.5]}),
    "constant loss": synthetic(loss=[0.7] * 300, grad_norms={"a.weight": [0.1] * 300}),
    "no gradients": synthetic(loss=smooth_loss(50)),
    "nan at step 0": synthetic(loss=[NAN] * 5, grad_norms={"a.weight": [NAN] * 5}),
}


@pytest.mark.parametrize("case", sorted(EDGE_CASES))
@pytest.mark.parametrize("kind", sorted(REGISTRY))
def test_detectors_survive_edge_cases(case: str, kind: str) -> None:
    REGISTRY[kind].check(EDGE_CASES[case])  # no exception


def test_edge_cases_give_the_right_verdicts() -> None:
    assert kinds(EDGE_CASES["empty"]) == []
    assert kinds(EDGE_CASES["single step"]) == []
    assert kinds(EDGE_CASES["no gradients"]) == []
    assert kinds(EDGE_CASES["constant loss"]) == ["loss_plateau"]  # nothing is learnt
    nan0 = check_all(EDGE_CASES["nan at step 0"])
    assert [(f.kind, f.step) for f in nan0] == [("nonfinite", 0)]


def test_healthy_history_is_silent() -> None:
    n = 300
    h = synthetic(
        loss=smooth_loss(n),
        grad_norms={f"l{i}.weight": [0.5 / (1 + s / 100) for s in range(n)] for i in range(4)},
    )
    assert kinds(h) == []


# -- one test per rule ---------------------------------------------------------------------------
def test_nonfinite_names_the_parameter_nearest_the_loss() -> None:
    h = synthetic(
        loss=[1.0, 0.9, NAN, NAN],
        grad_norms={
            "a.weight": [1, 1, NAN, NAN],
            "b.weight": [1, 1, NAN, NAN],
            "c.weight": [1, 1, 1, 1],
        },
    )
    (f,) = check_all(h)
    assert (f.kind, f.step, f.layer) == ("nonfinite", 2, "b")


def test_exploding_by_scale_at_step_0() -> None:
    h = synthetic(
        grad_norms={"a.weight": [5e4] * 3, "b.weight": [1.0] * 3},
        param_stats={
            "a.weight": {"weight_norm": [10.0] * 3},
            "b.weight": {"weight_norm": [10.0] * 3},
        },
    )
    (f,) = [f for f in check_all(h) if f.kind == "exploding_gradients"]
    assert (f.step, f.layer) == (0, "a")


def test_exploding_by_growth_but_not_a_single_spike() -> None:
    base = [1.0] * 40
    grows = base + [200.0, 500.0, 2000.0, 1e4] + [1e5] * 10
    h = synthetic(grad_norms={"a.weight": grows, "b.weight": grows})
    (f,) = [f for f in check_all(h) if f.kind == "exploding_gradients"]
    assert f.step == 40
    one_spike = [*base, 500.0, *base]
    assert "exploding_gradients" not in kinds(synthetic(grad_norms={"a.weight": one_spike}))


def test_vanishing_needs_the_first_layer_tiny_against_the_last() -> None:
    n = 20
    vanishing = {"l0.weight": [1e-7] * n, "l1.weight": [1e-4] * n, "l2.weight": [0.5] * n}
    (f,) = [
        f for f in check_all(synthetic(grad_norms=vanishing)) if f.kind == "vanishing_gradients"
    ]
    assert (f.step, f.layer) == (0, "l0")
    small_everywhere = {k: [1e-5] * n for k in vanishing}  # small but balanced: not vanishing
    assert "vanishing_gradients" not in kinds(synthetic(grad_norms=small_everywhere))
    recovered = {**vanishing, "l0.weight": [1e-7] * (n - 1) + [0.1]}  # fine at the end
    assert "vanishing_gradients" not in kinds(synthetic(grad_norms=recovered))


def test_dead_units_need_most_units_dead_on_the_recent_samples() -> None:
    dead = [0.0] * 60 + [0.3] * 40  # 60% of units never active
    sparse = [0.02] * 100  # rarely active, but alive
    h = synthetic(
        acts={"relu": {"zero_frac": [0.9] * 4}, "act2": {"zero_frac": [0.9] * 4}},
        act_steps=[0, 10, 20, 30],
        module_types={"relu": "ReLU", "act2": "ReLU"},
        units={
            "relu": {s: dead for s in (0, 10, 20, 30)},
            "act2": {s: sparse for s in (0, 10, 20, 30)},
        },
    )
    (f,) = [f for f in check_all(h) if f.kind == "dead_units"]
    assert (f.step, f.layer) == (0, "relu")
    revived = synthetic(
        acts={"relu": {"zero_frac": [0.9] * 4}},
        act_steps=[0, 10, 20, 30],
        module_types={"relu": "ReLU"},
        units={"relu": {0: dead, 10: dead, 20: [0.5] * 100, 30: [0.5] * 100}},
    )
    assert "dead_units" not in kinds(revived)
    not_relu = synthetic(
        acts={"fc": {"zero_frac": [0.0] * 4}},
        act_steps=[0, 10, 20, 30],
        module_types={"fc": "Linear"},
        units={"fc": {s: dead for s in (0, 10, 20, 30)}},
    )
    assert "dead_units" not in kinds(not_relu)
    # outputs that turned NaN are never > 0, and not dead: the NaN is the story
    nan = [0.0] * 100
    broken = synthetic(
        acts={"relu": {"nonfinite": [0, 6400, 6400, 6400]}},
        act_steps=[0, 10, 20, 30],
        module_types={"relu": "ReLU"},
        units={"relu": {0: [0.5] * 100, 10: nan, 20: nan, 30: nan}},
    )
    assert "dead_units" not in kinds(broken)


def test_saturation_must_hold_for_most_samples() -> None:
    h = synthetic(acts={"tanh": {"sat_frac": [0.2, 0.7, 0.8, 0.9]}}, act_steps=[0, 10, 20, 30])
    (f,) = [f for f in check_all(h) if f.kind == "saturated_units"]
    assert (f.step, f.layer) == (10, "tanh")
    passing = synthetic(acts={"tanh": {"sat_frac": [0.9, 0.2, 0.1, 0.1]}})
    assert "saturated_units" not in kinds(passing)


def test_loss_spike_recovers_divergence_does_not() -> None:
    loss = smooth_loss(300)
    spiked = [*loss[:200], loss[199] * 20, *loss[201:]]
    (f,) = [f for f in check_all(synthetic(loss=spiked)) if f.kind == "loss_spike"]
    assert f.step == 200
    diverged = loss[:200] + [loss[199] * (1.2**i) for i in range(1, 101)]
    found = kinds(synthetic(loss=diverged))
    assert "loss_divergence" in found and "loss_spike" not in found


def test_a_divergence_the_guard_rolled_back_is_named() -> None:
    """After a rollback the loss is back down: the curve shows nothing, the event does."""
    h = synthetic(loss=[1.0 - 0.005 * i for i in range(120)])
    assert "loss_divergence" not in {f.kind for f in check_all(h)}
    reason = "loss diverged: rolling median 2.06 over 50 steps, 240x its best"
    h.events = [
        Event(80, 0.0, "rollback", "...", {"reason": reason, "to_step": 60, "diverged": True})
    ]
    (f,) = [f for f in check_all(h) if f.kind == "loss_divergence"]
    assert (f.step, f.evidence[0].value, f.evidence[1].value) == (80, reason, 60)


def test_divergence_that_ends_non_finite() -> None:
    h = synthetic(loss=[5.0, 4.0, 3.5, 9.0, 30.0, 400.0, INF, NAN])
    (f,) = [f for f in check_all(h) if f.kind == "loss_divergence"]
    assert f.step == 3  # 9.0 is the first loss above twice the best (3.5)


def test_plateau_needs_enough_steps() -> None:
    flat = [1.386 + 0.01 * math.sin(i) for i in range(400)]
    assert "loss_plateau" in kinds(synthetic(loss=flat))
    assert "loss_plateau" not in kinds(synthetic(loss=flat[:60]))
    assert "loss_plateau" not in kinds(synthetic(loss=smooth_loss(400)))


def test_poor_initialization_wants_a_consistent_trend() -> None:
    shrinking = {f"l{i}": {"std": [0.5 / 10**i]} for i in range(5)}
    types = {f"l{i}": "Linear" for i in range(5)}
    h = synthetic(acts=shrinking, act_steps=[0], module_types=types)
    (f,) = [f for f in check_all(h) if f.kind == "poor_initialization"]
    assert (f.step, f.layer) == (0, "l4")
    zigzag = {f"l{i}": {"std": [0.5 if i % 2 else 0.005]} for i in range(5)}
    assert "poor_initialization" not in kinds(
        synthetic(acts=zigzag, act_steps=[0], module_types=types)
    )
    default_init = {
        f"l{i}": {"std": [0.6 / 2.5**i]} for i in range(3)
    }  # 3 layers of PyTorch default
    assert "poor_initialization" not in kinds(
        synthetic(acts=default_init, act_steps=[0], module_types=types)
    )


def _updates(ratio: float, n: int = 5) -> dict[str, dict[str, list[float]]]:
    return {"fc.weight": {"weight_norm": [2.0] * n, "update_norm": [2.0 * ratio] * n}}


def test_large_and_tiny_updates() -> None:
    grads = {"fc.weight": [0.1] * 5}
    large = check_all(synthetic(grad_norms=grads, param_stats=_updates(0.9)))
    assert [(f.kind, f.step, f.layer) for f in large] == [("large_updates", 1, "fc")]
    tiny = check_all(synthetic(grad_norms=grads, param_stats=_updates(1e-10)))
    assert [(f.kind, f.layer) for f in tiny] == [("tiny_updates", "fc")]
    assert check_all(synthetic(grad_norms=grads, param_stats=_updates(1e-3))) == []


def test_converged_noisy_loss_is_not_a_divergence() -> None:
    # a regression loss that fell from 0.22 to ~0.002 and wanders 0.001-0.0036 (batch noise)
    tail = [0.0014, 0.0033, 0.0021, 0.0019, 0.0005, 0.0025, 0.001, 0.0013, 0.0029, 0.0036]
    loss = [0.2232, 0.1091, 0.1718, 0.0242, 0.0456, 0.0151, 0.0082] + tail * 4
    assert "loss_divergence" not in kinds(synthetic(loss=loss))


def test_weight_matrices_and_update_ratios_are_computed_once_per_history(monkeypatch) -> None:
    """Every detector and the diagnosis ask for them; a wide log pays for them once."""
    from gradoc.detect import signals as _util

    calls = []
    real = _util.update_ratio_series
    monkeypatch.setattr(_util, "update_ratio_series", lambda u, w: calls.append(1) or real(u, w))
    steps = 20
    h = synthetic(
        loss=[1.0] * steps,
        grad_norms={"a.weight": [0.1] * steps, "b.weight": [0.1] * steps},
        param_stats={
            n: {"weight_norm": [1.0] * steps, "update_norm": [1e-3] * steps}
            for n in ("a.weight", "b.weight")
        },
    )
    check_all(h)
    first = _util.update_ratios(h)
    assert len(calls) == 2  # one series per weight, however many asked
    assert [p.name for p in _util.weight_params(h)] == ["a.weight", "b.weight"]
    assert first["a.weight"].values[0] == pytest.approx(1e-3)
    first.pop("a.weight")  # a caller's copy: changing it changes nothing kept
    _util.weight_params(h).clear()
    assert set(_util.update_ratios(h)) == {"a.weight", "b.weight"}
    assert len(_util.weight_params(h)) == 2 and len(calls) == 2


def _adam_history(lr: float, weight_norm: float, optimizer: str = "AdamW") -> object:
    h = synthetic(
        loss=smooth_loss(60),
        grad_norms={f"l{i}.weight": [0.1] * 60 for i in range(3)},
        param_stats={
            f"l{i}.weight": {"weight_norm": [weight_norm] * 60, "update_norm": [0.01] * 60}
            for i in range(3)
        },
        shapes={f"l{i}.weight": (10, 10) for i in range(3)},
    )
    h.lr = h.loss.__class__(list(range(60)), [lr * min(1.0, (s + 1) / 30) for s in range(60)])
    h.meta = RunMeta.of({"optimizers": [{"type": optimizer, "lr": lr}]})
    return h


def test_an_adam_learning_rate_as_large_as_the_weights_is_a_large_update() -> None:
    """Weights of RMS 0.07 (norm 0.7 over 100 values): lr 0.1 is 1.4x them, as nanoGPT at
    lr 0.1; lr 1e-3 (its recipe) is 0.014x; SGD's step scales with the gradient instead."""
    (f,) = [f for f in check_all(_adam_history(0.1, 0.7)) if f.kind == "large_updates"]  # type: ignore[arg-type]
    d = AdamRate.in_(f)
    assert d is not None and d.ratio == pytest.approx(0.1 / 0.07)
    assert f.to_json()["details"]["rule"] == "adam_lr"
    assert f.step == 20  # the warm-up crossed lr = weight RMS there: 0.1 * 21 / 30
    assert "large_updates" not in kinds(_adam_history(1e-3, 0.7))
    assert "large_updates" not in kinds(_adam_history(0.1, 0.7, optimizer="SGD"))


def test_clip_factors_say_where_the_programs_clip_bit() -> None:
    """A zero or small norm is left alone (factor 1); a larger one is scaled to the
    threshold; a NaN or inf one is what clipping cannot rescue (factor 0)."""
    from gradoc.detect.signals import clip_factors
    from gradoc.store import Series

    measured = Series([0, 1, 2, 3, 4, 5], [0.0, 0.5, 4.0, NAN, INF, 2.0])
    limits = Series([0, 1, 2, 3, 4], [1.0] * 5)  # step 5 was not clipped
    assert clip_factors(measured, limits) == [
        (1.0, 1.0),
        (1.0, 1.0),
        (1.0, 0.25),
        (1.0, 0.0),
        (1.0, 0.0),
    ]
    # how often a clip bit, as a sign of how large the gradients ran, is read where they
    # were finite: after a NaN every step "bites", a clip at inf too
    assert clip_factors(measured, limits, finite=True) == [(1.0, 1.0), (1.0, 1.0), (1.0, 0.25)]


@pytest.mark.parametrize(("at", "found"), [(0, True), (20, False)])
def test_a_gradient_1e4x_its_weights_for_one_step_is_an_explosion_only_at_the_start(
    at: int, found: bool
) -> None:
    """After ordinary steps, one step's huge gradient that comes straight back is that
    batch's spike; at the first step, before any update, it is the initialisation's."""
    from gradoc.findings.exploding_gradients import ExplodingGradients

    grads = [1.0] * 40
    grads[at] = 1e4
    h = synthetic(
        grad_norms={"a.weight": grads},
        param_stats={"a.weight": {"weight_norm": [1.0] * 40}},
        shapes={"a.weight": (8, 8)},
    )
    assert bool(ExplodingGradients().check(h)) is found
