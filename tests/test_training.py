"""The kind of training each objective is judged as (``detect.training``), and the
loss-trend rules judging only the objectives expected to fall (``findings.check_all``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn as nn

import gradoc
from gradoc.detect import History
from gradoc.detect.history import synthetic
from gradoc.detect.training import Training, judge
from gradoc.findings import check_all
from gradoc.store import Series
from gradoc.store.meta import RunMeta


def _series(values: list[float]) -> Series:
    return Series(list(range(len(values))), values)


def _meta(*objectives: dict[str, Any], **more: Any) -> RunMeta:
    return RunMeta(objectives=list(objectives), **more)


def test_a_loss_that_runs_through_anothers_parameters_plays_a_game() -> None:
    meta = _meta(
        {"id": 0, "name": "disc", "optimizers": [0], "loss_fn": {}, "reaches": []},
        {"id": 1, "name": "gen", "optimizers": [1], "loss_fn": {}, "reaches": [0]},
    )
    found = judge(meta, lambda k: _series([1.0] * 20))
    assert [(o.name, o.training, o.role) for o in found] == [
        ("disc", Training.ADVERSARIAL, "discriminator"),
        ("gen", Training.ADVERSARIAL, "generator"),
    ]
    assert not any(o.falls for o in found)


def test_a_signed_surrogate_is_a_policy_and_its_regression_a_critic() -> None:
    meta = _meta(
        {"id": 0, "name": "actor", "optimizers": [0], "loss_fn": {"node": "NegBackward0"}},
        {"id": 1, "name": "critic", "optimizers": [1], "loss_fn": {"fn": "mse_loss"}},
        {"id": 2, "name": "head", "optimizers": [2], "loss_fn": {"fn": "cross_entropy"}},
    )
    signed = [(-1) ** i * 0.01 for i in range(40)]
    growing = [1.0 + i * 10 for i in range(40)]
    found = judge(meta, lambda k: _series(signed if k == 0 else growing))
    assert [(o.training, o.role) for o in found] == [
        (Training.REINFORCEMENT, "policy"),
        (Training.REINFORCEMENT, "critic"),
        (Training.SUPERVISED, "loss"),  # a classifier beside them still should fall
    ]


def test_one_objective_is_supervised_unless_its_loss_takes_both_signs() -> None:
    assert judge(RunMeta(), lambda k: _series([1.0 - i / 100 for i in range(40)]))[0].falls
    signed = judge(RunMeta(), lambda k: _series([(-1) ** i * 0.5 for i in range(40)]))[0]
    assert (signed.training, signed.role) == (Training.REINFORCEMENT, "policy")
    # a supervised loss function is never a policy, whatever its values
    fn = RunMeta(loss_fn={"fn": "mse_loss"})
    assert judge(fn, lambda k: _series([(-1) ** i * 0.5 for i in range(40)]))[0].falls


def test_trend_rules_judge_only_the_objectives_expected_to_fall() -> None:
    """A critic whose loss climbs 100x with the returns raises no divergence; the same climb
    in a supervised objective beside it does, named after that objective."""
    h = synthetic(loss=[(-1) ** i * 0.01 for i in range(200)])
    climb = [1.0] * 50 + [1.0 + i for i in range(150)]
    meta = _meta(
        {"id": 0, "name": "actor", "optimizers": [0], "loss_fn": {}},
        {"id": 1, "name": "critic", "optimizers": [1], "loss_fn": {"fn": "mse_loss"}},
        {"id": 2, "name": "decoder", "optimizers": [2], "loss_fn": {"fn": "cross_entropy"}},
    )
    h.meta = meta
    h.objective_losses = {1: _series(climb), 2: _series(climb)}
    trend = [f for f in check_all(h) if f.kind in ("loss_divergence", "loss_blowup")]
    assert trend and {f.objective for f in trend} == {"decoder"}, [f.summary for f in trend]
    assert all(f.summary.startswith("decoder: ") for f in trend)


def test_two_optimizers_record_one_loss_series_each(tmp_path: Any) -> None:
    torch.manual_seed(0)
    gen, disc = nn.Linear(3, 3), nn.Linear(3, 1)
    og, od = torch.optim.SGD(gen.parameters(), lr=0.1), torch.optim.SGD(disc.parameters(), lr=0.1)
    run = gradoc.watch([gen, disc], og, out=tmp_path / "run")
    run.attach([gen, disc], od)
    d_losses, g_losses = [], []
    for _ in range(5):
        d_loss = disc(gen(torch.randn(4, 3)).detach()).pow(2).mean()
        od.zero_grad()
        d_loss.backward()
        od.step()
        g_loss = (disc(gen(torch.randn(4, 3))) - 1).pow(2).mean()
        og.zero_grad()
        g_loss.backward()
        og.step()
        d_losses.append(d_loss.item())
        g_losses.append(g_loss.item())
    run.close()
    log = gradoc.open_run(run.dir)
    said = {o["name"]: o for o in log.meta.objectives}
    assert set(said) == {"linear0", "linear1"}
    gen_objective, disc_objective = said["linear0"], said["linear1"]
    assert gen_objective["id"] == 0  # the first optimizer's: the steps table's loss
    assert gen_objective["reaches"] == [disc_objective["id"]] and disc_objective["reaches"] == []
    assert log.objective_loss(0).values == pytest_approx(g_losses)
    assert log.objective_loss(disc_objective["id"]).values == pytest_approx(d_losses)
    objectives = History.load(log).objectives
    assert {(o.name, o.role) for o in objectives} == {
        ("linear0", "generator"),
        ("linear1", "discriminator"),
    }


def test_one_loss_for_two_optimizers_is_one_objective(tmp_path: Any) -> None:
    torch.manual_seed(0)
    actor, critic = nn.Linear(3, 2), nn.Linear(3, 1)
    oa, oc = (
        torch.optim.SGD(actor.parameters(), lr=0.1),
        torch.optim.SGD(critic.parameters(), lr=0.1),
    )
    run = gradoc.watch([actor, critic], oa, out=tmp_path / "run")
    run.attach([actor, critic], oc)
    for _ in range(4):
        x = torch.randn(4, 3)
        loss = actor(x).pow(2).mean() + critic(x).pow(2).mean()
        oa.zero_grad()
        oc.zero_grad()
        loss.backward()
        oa.step()
        oc.step()
    run.close()
    log = gradoc.open_run(run.dir)
    assert log.meta.objectives == [] and log.num_steps == 4  # one objective: nothing more
    assert len(log.scalar("loss")) == 4


def pytest_approx(values: list[float]) -> Any:
    import pytest

    return pytest.approx(values, rel=1e-6)


def test_a_dead_share_unchanged_since_the_first_sample_is_information() -> None:
    """Harm before alarm: 52-55% inactive from the first sample to the last is the layer
    meeting its data; the same layer alive at first and dead later is a warning."""
    steps = list(range(0, 200, 10))
    as_born = {s: [0.0] * (53 + (s // 10) % 3) + [0.5] * (47 - (s // 10) % 3) for s in steps}
    died = {s: ([0.5] * 100 if s < 100 else [0.0] * 60 + [0.5] * 40) for s in steps}

    def run(units: dict[int, list[float]]) -> list[Any]:
        h = synthetic(
            loss=[1.0] * 200,
            acts={"critic.1": {"zero_frac": [0.5] * len(steps)}},
            act_steps=steps,
            module_types={"critic.1": "ReLU"},
            units={"critic.1": units},
        )
        return [f for f in check_all(h) if f.kind == "dead_units"]

    (info,) = run(as_born)
    assert info.severity == "info" and "as they were at the first sample" in info.summary
    (warning,) = run(died)
    assert warning.severity == "warning" and warning.step == 100


def test_a_statistic_alone_on_a_loss_that_fell_is_information() -> None:
    """Harm before alarm: saturated units on a run whose loss fell 10x did not stop it
    learning (information, with the reason); the same statistic on a loss that stalled is a
    warning, and so is one beside a finding of harm."""
    acts = {"tanh": {"sat_frac": [0.2, 0.7, 0.8, 0.9]}}

    def saturated(loss: list[float]) -> Any:
        h = synthetic(loss=loss, acts=acts, act_steps=[0, 10, 20, 30])
        return next(f for f in check_all(h) if f.kind == "saturated_units")

    learnt = saturated([2.0 * 0.97**i for i in range(80)])
    assert learnt.severity == "info" and "did not stop the model learning" in learnt.summary
    stalled = saturated([2.0 + 0.01 * (-1) ** i for i in range(80)])
    assert stalled.severity == "warning"
    spiked = [2.0 * 0.97**i for i in range(80)]
    spiked[60] = 50.0  # a spike beside it: harm seen in the run, the statistic stays
    assert saturated(spiked).severity == "warning"


def test_one_loss_of_a_policy_and_a_value_regression_is_an_actor_critic() -> None:
    """One optimizer, one loss: a policy's log-probabilities plus a value regression is read
    from the graph as an actor-critic, and its loss, positive and growing with the returns,
    is not judged as one that should fall (a classifier with a regression head is)."""
    import torch.nn.functional as F
    from torch.distributions import Categorical

    from gradoc.collect.graph.losses import kind

    logits, value = torch.randn(6, 2, requires_grad=True), torch.randn(6, requires_grad=True)
    ret = torch.rand(6) * 10
    dist = Categorical(logits=logits)
    action = dist.sample()
    both = -(dist.log_prob(action) * (ret - value.detach())).mean() + F.mse_loss(value, ret)
    assert kind(both.grad_fn)["fn"] == "actor_critic"
    # an episode's terms stacked, a policy of probabilities (pytorch/examples' actor_critic)
    probs = Categorical(probs=F.softmax(logits, dim=-1))
    terms = [-probs.log_prob(a) * float(r) for a, r in zip(action, ret)]
    values = [F.smooth_l1_loss(v, r) for v, r in zip(value, ret)]
    episode = torch.stack(terms).sum() + torch.stack(values).sum()
    assert kind(episode.grad_fn)["fn"] == "actor_critic"
    multitask = F.cross_entropy(logits, action) + 0.1 * F.mse_loss(value, ret)
    assert "fn" not in kind(multitask.grad_fn)
    growing = [1.0 + i for i in range(60)]
    (found,) = judge(RunMeta(loss_fn={"fn": "actor_critic"}), lambda k: _series(growing))
    assert (found.training, found.role, found.falls) == (
        Training.REINFORCEMENT,
        "actor-critic",
        False,
    )
    h = dataclasses.replace(synthetic(loss=growing), meta=RunMeta(loss_fn={"fn": "actor_critic"}))
    trend = {"loss_divergence", "loss_blowup", "loss_plateau", "loss_spike", "loss_unbounded"}
    assert not trend & {f.kind for f in check_all(h)}
    assert trend & {f.kind for f in check_all(synthetic(loss=growing))}  # judged supervised
