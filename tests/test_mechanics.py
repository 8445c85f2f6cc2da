"""The kind of training read from a loss's autograd graph (``collect.graph.mechanics``), whatever
its spelling, and the judgement made of it (``detect.training``)."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Categorical, Normal

from gradoc.collect.graph import mechanics
from gradoc.detect.training import Returns, Training, judge
from gradoc.store import Series
from gradoc.store.meta import RunMeta


def _facts(*losses: torch.Tensor) -> mechanics.Facts:
    facts = mechanics.Facts()
    for loss in losses:
        mechanics.read(loss.grad_fn, facts)
    return facts


def _reads(*losses: torch.Tensor) -> str | None:
    return _facts(*losses).said()[0]


torch.manual_seed(0)
NET = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 3))
S = torch.randn(32, 4)
A = torch.randint(0, 3, (32,))


def test_a_td_error_is_a_value_objective_however_it_is_written() -> None:
    with torch.no_grad():
        target = 1.0 + 0.9 * NET(S).max(1).values
    q = NET(S)
    assert _reads(F.smooth_l1_loss(q.gather(1, A[:, None]).squeeze(1), target)) == "value"
    assert _reads(F.mse_loss(q[torch.arange(32), A], target)) == "value"
    by_hand = ((q[torch.arange(32), A] - target) ** 2).mean()
    assert _reads(0.5 * by_hand) == "value"
    # a regression of the whole output onto labels is a regression, no value by itself
    assert _reads(F.mse_loss(q, torch.randn(32, 3))) == "regression"
    # both sides learning: no fixed target
    assert _reads(F.mse_loss(q, NET(S + 1))) is None


def test_a_policy_gradient_is_read_from_its_log_probabilities_and_weights() -> None:
    advantage = torch.randn(32)
    logits = NET(S)
    reinforce = -(Categorical(logits=logits).log_prob(A) * advantage).mean()
    assert _reads(reinforce) == "policy"
    by_index = -(F.log_softmax(logits, -1)[torch.arange(32), A] * advantage).mean()
    assert _reads(by_index) == "policy"
    # pytorch/examples' REINFORCE: an episode's terms, each -log_prob * R, concatenated
    probs = F.softmax(NET(S), -1)
    terms = [(-Categorical(probs[i]).log_prob(A[i]) * 0.9**i).unsqueeze(0) for i in range(8)]
    assert _reads(torch.cat(terms).sum()) == "policy"
    old = Categorical(logits=logits).log_prob(A).detach() + 0.01
    ratio = (Categorical(logits=NET(S)).log_prob(A) - old).exp()
    ppo = -torch.min(ratio * advantage, ratio.clamp(0.8, 1.2) * advantage).mean()
    facts = _facts(ppo)
    assert facts.said()[0] == "policy" and facts.policy == "ratio" and facts.clipped
    # a Gaussian policy's log-density, summed over the action's dimensions
    mu, log_std = NET(S), torch.zeros(3, requires_grad=True)
    actions = torch.randn(32, 3)
    gauss = -(Normal(mu, log_std.exp()).log_prob(actions).sum(-1) * advantage).mean()
    assert _reads(gauss) == "policy"
    # a cross-entropy is no policy
    assert _reads(F.cross_entropy(NET(S), A)) is None


def test_one_loss_for_an_actor_and_a_critic_is_read_as_both() -> None:
    logits, values = NET(S), NET(S)[:, 0]
    returns = torch.randn(32)
    advantage = (returns - values).detach()
    loss = (
        -(Categorical(logits=logits).log_prob(A) * advantage).mean()
        + 0.5 * F.mse_loss(values, returns)
        - 0.01 * Categorical(logits=logits).entropy().mean()
    )
    assert _reads(loss) == "actor_critic"


def test_a_wasserstein_critic_its_penalty_and_a_frozen_critic_are_seen() -> None:
    critic = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
    real, fake = torch.randn(32, 4), torch.randn(32, 4)
    mixed = (0.5 * real + 0.5 * fake).requires_grad_()
    (grad,) = torch.autograd.grad(critic(mixed).sum(), mixed, create_graph=True)
    penalty = ((grad.norm(2, dim=1) - 1) ** 2).mean()
    # three backward() calls of one step: real, fake, penalty
    facts = _facts(critic(real).mean(), critic(fake).mean(), 10 * penalty)
    assert facts.said()[0] == "raw_scores" and facts.penalty
    assert not _facts(critic(fake).mean() - critic(real).mean()).penalty
    assert _reads(F.binary_cross_entropy_with_logits(critic(real), torch.ones(32, 1))) is None
    # the generator's loss through a critic whose parameters are frozen reaches them by
    # the weights its layers saved
    for p in critic.parameters():
        p.requires_grad_(False)
    gen = nn.Linear(2, 4)
    facts = _facts(-critic(gen(torch.randn(32, 2))).mean())
    weight = critic[2].weight.untyped_storage().data_ptr()
    assert weight in facts.storages


def test_a_graph_of_no_foreseen_shape_is_read_as_nothing() -> None:
    facts = mechanics.Facts()
    mechanics.reads(None, facts)
    mechanics.reads(object(), facts)  # no name(): not an autograd node
    assert facts.said() == (None, "")


def test_penalties_tell_one_made_and_never_backpropagated() -> None:
    x = torch.randn(8, 4, requires_grad=True)
    net = nn.Linear(4, 1)
    backed = mechanics.Penalties()
    (g,) = torch.autograd.grad(net(x).tanh().sum(), x, create_graph=True)
    backed.watch([g], {"file": "a.py", "line": 3})
    (g.norm() ** 2).backward()
    assert backed.step_ended(0) is None
    dropped = mechanics.Penalties()
    (g,) = torch.autograd.grad(net(x).tanh().sum(), x, create_graph=True)
    dropped.watch([g], {"file": "a.py", "line": 3})
    told = dropped.step_ended(1)
    assert told == {"made": 1, "unbacked": {"file": "a.py", "line": 3, "objective": 1}}


def _series(values: list[float]) -> Series:
    return Series(list(range(len(values))), values)


def _meta(fn: dict[str, Any]) -> RunMeta:
    return RunMeta(loss_fn=fn)


def test_the_judgement_follows_what_the_graph_showed() -> None:
    rising = _series([0.01 * math.exp(i / 10) for i in range(60)])
    value = {"fn": "smooth_l1_loss", "reads": "value", "evidence": "a Huber regression"}
    [o] = judge(_meta(value), lambda k: rising)
    assert (o.training, o.role, o.falls) == (Training.REINFORCEMENT, "value", False)
    # the return fell: the value loss's trend is judged again
    [o] = judge(_meta(value), lambda k: rising, returns=Returns(True, True, "it fell"))
    assert o.falls and "it fell" in o.why
    # a plain regression is a value function only in an agent's run
    regression = {"fn": "mse_loss", "reads": "regression", "evidence": "a squared regression"}
    assert judge(_meta(regression), lambda k: rising)[0].training is Training.SUPERVISED
    agent = judge(_meta(regression), lambda k: rising, returns=Returns(read=True))[0]
    assert agent.training is Training.REINFORCEMENT
    ratio = {"node": "NegBackward0", "reads": "policy", "evidence": "a probability ratio"}
    assert judge(_meta(ratio), lambda k: rising)[0].role == "policy"


def test_an_objective_of_no_recognised_kind_beside_others_is_not_judged_by_its_trend() -> None:
    meta = RunMeta(
        objectives=[
            {"id": 0, "name": "encoder", "optimizers": [0], "loss_fn": {"node": "AddBackward0"}},
            {"id": 1, "name": "head", "optimizers": [1], "loss_fn": {"fn": "cross_entropy"}},
        ]
    )
    found = judge(meta, lambda k: _series([1.0 + i for i in range(40)]))
    assert [(o.role, o.falls) for o in found] == [("unrecognised", False), ("loss", True)]


# -- the one walk of a loss's graph (collect/graph/walk.py) -----------------------------------
def _chain_loss(depth: int):  # type: ignore[no-untyped-def]
    import torch

    x = torch.randn(4, requires_grad=True)
    y = x
    for _ in range(depth):
        y = y * 2.0 + 1.0
    return x, y.sum()


def test_the_walk_meets_each_node_once_within_its_budget() -> None:
    from gradoc.collect.graph import Walk

    _x, loss = _chain_loss(50)
    everything = [n.name().split("::")[-1] for n in Walk([loss.grad_fn], None)]
    assert everything.count("AccumulateGrad") == 1  # x reached by one path, met once
    assert len(everything) == 1 + 2 * 50 + 1  # sum, 50 x (mul, add), the leaf
    assert len(list(Walk([loss.grad_fn], 10))) == 10  # the budget bounds it


def test_a_reader_prunes_only_below_the_node_it_took() -> None:
    import torch

    from gradoc.collect.graph import Walk

    a = torch.randn(3, requires_grad=True)
    b = torch.randn(3, requires_grad=True)
    loss = (a.exp() + b.sin()).sum()
    walk = Walk([loss.grad_fn])
    met = []
    for node in walk:
        met.append(node.name().split("::")[-1])
        if met[-1] == "ExpBackward0":
            walk.prune()  # taken: not below it
    assert "ExpBackward0" in met and "SinBackward0" in met  # beside it: still walked
    assert met.count("AccumulateGrad") == 1  # b's leaf; a's, below the exp, is not


def test_breadth_first_meets_the_nearest_nodes_first() -> None:
    from gradoc.collect.graph import Walk

    _x, loss = _chain_loss(3)
    near = [n.name() for n in Walk([loss.grad_fn], 3, breadth=True)]
    assert near == ["SumBackward0", "AddBackward0", "MulBackward0"]


def test_collect_walks_the_graph_only_through_the_one_walk() -> None:
    """A reader of the graph never walks it its own way: no loop over ``next_functions``
    with its own stack in collect/, except the short looks beside a match (a softmax's
    product a few nodes below, a Gaussian's log-density's shape)."""
    import ast
    from pathlib import Path

    import gradoc

    root = Path(gradoc.__file__).parent / "collect"
    looks = {("graph/attention.py", "_logits_product"), ("graph/mechanics.py", "_density")}
    walks = set()
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).as_posix()
        if rel == "graph/walk.py":
            continue
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, ast.FunctionDef):
                continue
            loops = [n for n in ast.walk(fn) if isinstance(n, ast.While)]
            if any(w in ast.unparse(loop) for loop in loops for w in ("next_functions", "_below(")):
                walks.add((rel, fn.name))
    assert walks == looks
