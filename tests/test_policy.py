"""A categorical policy's entropy read from the loss's autograd graph (``collect.graph.policy``),
recorded per objective, and the collapse rule that judges it (``findings.policy_collapse``)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical

import gradoc
from gradoc.collect.graph import policy
from gradoc.collect.graph.policy import PolicyReader, entropy
from gradoc.detect.history import synthetic
from gradoc.findings import check_all
from gradoc.store import Series
from gradoc.store.meta import RunMeta


def _logits(rows: int = 6, k: int = 4) -> torch.Tensor:
    torch.manual_seed(0)
    return (3 * torch.randn(rows, k)).requires_grad_()


@pytest.mark.parametrize("made", ["probs", "logits"])
def test_the_entropy_of_a_categorical_policy_is_read_from_its_log_prob(made: str) -> None:
    x = _logits()
    dist = Categorical(probs=F.softmax(x, -1)) if made == "probs" else Categorical(logits=x)
    a = dist.sample()
    adv = torch.randn(6)
    loss = -(dist.log_prob(a) * adv).mean()
    share, actions = entropy(loss.grad_fn)
    assert actions == 4
    expected = (dist.entropy().mean() / math.log(4)).item()
    assert share.item() == pytest.approx(expected, rel=1e-4)


def test_an_episode_of_one_state_distributions_is_their_mean() -> None:
    x = _logits(5, 2)
    dists = [Categorical(F.softmax(row, -1)) for row in x]
    terms = [-d.log_prob(d.sample()) * 0.5 for d in dists]
    loss = torch.stack(terms).sum() + F.smooth_l1_loss(x.sum(), torch.tensor(1.0))
    share, _ = entropy(loss.grad_fn)
    expected = sum(d.entropy().item() for d in dists) / 5 / math.log(2)
    assert share.item() == pytest.approx(expected, rel=1e-4)


def test_no_policy_is_read_in_a_supervised_loss() -> None:
    x = _logits()
    y = torch.tensor([0, 1, 2, 3, 0, 1])
    assert entropy(F.cross_entropy(x, y).grad_fn) is None
    assert entropy(F.mse_loss(x, torch.zeros_like(x)).grad_fn) is None
    # a gather of anything but log-probabilities is no policy
    assert entropy(x.gather(1, y[:, None]).sum().grad_fn) is None


def test_a_certain_policy_reads_near_zero_and_a_uniform_one_one() -> None:
    certain = torch.tensor([[40.0, 0.0, 0.0]], requires_grad=True)
    uniform = torch.zeros(1, 3, requires_grad=True)
    for x, expected in ((certain, 0.0), (uniform, 1.0)):
        d = Categorical(logits=x)
        share, _ = entropy((-d.log_prob(torch.tensor([0]))).sum().grad_fn)
        assert share.item() == pytest.approx(expected, abs=1e-6)


def test_the_reader_samples_its_reads_and_stops_looking_where_there_is_no_policy() -> None:
    x = _logits()
    d = Categorical(logits=x)
    node = (-d.log_prob(d.sample())).mean().grad_fn
    reader = PolicyReader()
    read = [reader.read(node) is not None for _ in range(policy.FIRST + 3 * policy.EVERY)]
    assert all(read[: policy.FIRST])
    assert [k for k, r in enumerate(read) if r and k >= policy.FIRST] == [20, 30, 40]
    supervised = F.mse_loss(x, torch.zeros_like(x)).grad_fn
    reader = PolicyReader()
    for _ in range(policy.FIRST):
        assert reader.read(supervised) is None
    assert reader.looked == policy.LOOKS  # three looks, then none


def _judged(entropies: list[float], fn: str = "actor_critic") -> list[str]:
    steps = list(range(20)) + list(range(20, 10 * len(entropies), 10))
    series = Series(steps[: len(entropies)], entropies)
    losses = [1.0 + 0.01 * i for i in range(series.steps[-1] + 1)]
    h = dataclasses.replace(
        synthetic(loss=losses), meta=RunMeta(loss_fn={"fn": fn}), policy_entropy={0: series}
    )
    return [f.kind for f in check_all(h)]


def test_a_policy_certain_within_a_few_updates_has_collapsed() -> None:
    fell = [0.98, 0.01, 1e-7] + [3e-6] * 60
    assert "policy_collapse" in _judged(fell)


def test_a_policy_that_grows_certain_over_many_updates_or_recovers_has_not() -> None:
    # our healthy PPO: 0.53 at update 20, below 0.001 about 100 updates later, 5e-5 at its end
    slow = [1.0 - 0.025 * i for i in range(20)] + [0.5 * 0.6**i for i in range(40)]
    assert slow[-1] < 1e-3
    assert "policy_collapse" not in _judged(slow)
    # pytorch/examples' actor-critic: a dip to 0.0075 and back
    dip = [0.99, 0.06, 0.015, 0.008, 0.0075] + [0.01] * 15 + [0.7] * 40
    assert "policy_collapse" not in _judged(dip)
    # a fast collapse that recovered is over by the end of the run
    recovered = [0.98, 1e-7] + [1e-6] * 18 + [0.6] * 40
    assert "policy_collapse" not in _judged(recovered)


def test_the_entropy_of_a_supervised_objective_is_not_judged() -> None:
    # a hand-written cross-entropy gathers log-probabilities too: a classifier that learns
    # fast is certain fast, and that is no collapse
    fell = [0.98, 0.01, 1e-7] + [3e-6] * 60
    assert "policy_collapse" not in _judged(fell, fn="cross_entropy")


class _Actor(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(3, 16)
        self.policy = nn.Linear(16, 2)
        self.value = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.relu(self.body(x))
        return self.policy(h), self.value(h).squeeze(-1)


def test_the_entropy_is_recorded_with_the_steps_and_read_back(tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = _Actor()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    with gradoc.watch(net, opt, out=tmp_path / "run"):
        for _ in range(45):
            logits, value = net(torch.randn(8, 3))
            dist = Categorical(logits=logits)
            ret = torch.randn(8)
            loss = -(dist.log_prob(dist.sample()) * (ret - value.detach())).mean()
            loss = loss + F.mse_loss(value, ret)
            opt.zero_grad()
            loss.backward()
            opt.step()
    with gradoc.open_run(tmp_path / "run") as log:
        series = log.policy_entropy(0)
        assert log.meta.loss_read["policy"]["actions"] == 2
    assert series.steps == [*range(20), 20, 30, 40]
    assert all(0.9 < v <= 1.0 for v in series.values), series.values  # near uniform at init
