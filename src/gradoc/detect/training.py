"""The kind of training each objective is, observed from what the run shows.

A run is not always one supervised loss that should fall. Each objective (one per group of
optimizers that a loss trains, ``gradoc.collect.step.objectives``) is judged as one of:

- **supervised**: its loss is expected to fall (a classifier, a regressor, a language model,
  a generator's reconstruction). The loss-trend rules (spike, blow-up, divergence, plateau)
  judge it.
- **adversarial**: it plays a game against another objective. Seen in the autograd graph:
  its loss runs through parameters another optimizer trains against it (a generator's loss
  through the discriminator; through a discriminator whose ``requires_grad`` the program
  turned off for the generator's step too, by the weights its layers saved:
  ``collect.graph.mechanics``), and that other objective is the discriminator. A discriminator's
  loss rising while the generator improves is the game working, and a Wasserstein critic's
  (the mean of its raw outputs, with its gradient penalty) grows as it sharpens, so the trend
  rules judge neither; what still means harm is a side that wins outright
  (``adversarial_imbalance``), a game that stopped (``game_stopped``), a critic with no
  constraint (``critic_unconstrained``), and non-finite values or gradients beyond any
  healthy run.
- **reinforcement**: it follows returns. Read from the loss's graph (``collect.graph.mechanics``):
  a policy objective weighs log-probabilities of the actions taken, or PPO's ratio
  ``exp(logp - logp_old)``, by a weight made without gradient (an advantage, a return); a
  value objective regresses onto targets made without gradient, its prediction picked at the
  actions taken (DQN's TD error), or any such regression in a run with a policy or whose
  episodes were read (``detect.measures``: a value function, a critic). One loss that adds
  both (an actor-critic with one optimizer) is judged as one "actor-critic". A loss of no
  known function that takes both signs all run long is a policy too (the advantage is
  centred: a healthy surrogate sits around 0). None is judged by its trend: the value loss
  follows the returns, which grow as the agent improves; only where the program's return
  fell is a value loss's rise judged again (role ``VALUE_HARMED``: a value function that
  diverges as the return falls is the harm). The gradient of a run whose every objective
  follows returns scales with them: its growth is no explosion unless it turns non-finite
  (``findings.exploding_gradients``). What still means harm for a policy is a collapse:
  certain of one action within a few updates of being uncertain, or certain while its return
  never improved (``findings.policy_collapse``, on the entropy read from the loss's graph,
  ``collect.graph.policy``).

A run with one objective is supervised unless its graph shows a policy, a value function or
an actor-critic, or its loss is a signed surrogate (one that changes sign all run long, not
once: a term with its sign flipped falls through 0 and stays, ``findings.loss_unbounded``).
In a run of several objectives, one whose loss is of no known function and whose graph showed
nothing (``UNRECOGNISED``) is not judged by its trend alone: nothing says it should fall.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from .._util.json_types import JsonObject
from .._util.text import StrEnum
from ..store import Series
from ..store.meta import RunMeta

SIGNED_SHARE = 0.1
"""A loss below 0 on at least this share of its steps, and above 0 on as many, takes both
signs: no supervised loss function does (each is >= 0; a log-likelihood objective is one
sign throughout)."""
CROSSINGS = 0.02
"""And it changes sign on at least this share of its steps: a policy's surrogate moves about 0
with its advantages all run long; a loss that crosses 0 once and stays below (a term with its
sign flipped, ``findings.loss_unbounded``) is no policy."""
REGRESSION = ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss")
"""Loss functions a value function (a critic) regresses onto returns with."""


COVERED = 0.5
"""No verdict about a loss read on fewer than this share of its steps (a healthy curve, a
blow-up, a plateau, a fix verified): what was not seen is not judged. Half: the fewest
steps on which a trend read from the loss still stands for the run's (a loss read on step 0
of 600, as the BiLSTM-CRF tutorial's was, says nothing of the other 599)."""


POLICY = "its loss takes both signs and is no supervised loss function (a policy gradient)"
"""Why an objective is judged a policy."""
BOTH = (
    "its loss adds a policy's log-probabilities and a value regression (an actor-critic with "
    "one optimizer): it follows the returns"
)
"""Why one loss is judged an actor-critic's (``collect.graph.losses``, read from its graph)."""


VALUE_HARMED = "value (return fell)"
"""The role of a value objective in a run whose return got worse: its loss's trend is judged
(a value loss that diverges as the return falls is harm, ``findings``)."""
UNRECOGNISED = "unrecognised"
"""The role of a loss of several objectives' run whose kind nothing showed."""
UNRECOGNISED_WHY = (
    "a loss of no known function, game or policy (nothing in its graph says what it is): its "
    "trend alone is not judged"
)


class Training(StrEnum):
    SUPERVISED = "supervised"
    ADVERSARIAL = "adversarial"
    REINFORCEMENT = "reinforcement"


EXPECTS: dict[Training, str] = {
    Training.SUPERVISED: "its loss should fall",
    Training.ADVERSARIAL: "its loss plays a game: it may rise while training works",
    Training.REINFORCEMENT: "its loss follows the returns: it is no measure of progress",
}


@dataclass(frozen=True, slots=True)
class Objective:
    """One objective of a run: its loss series and the kind of training it was judged as."""

    id: int
    name: str
    loss: Series
    training: Training = Training.SUPERVISED
    role: str = "loss"
    """What it is in its kind of training: loss, generator, discriminator, policy, critic."""
    why: str = "one objective whose loss is a supervised loss function"
    optimizers: list[int] = field(default_factory=lambda: [0])
    entropy: Series = field(default_factory=lambda: Series([], []))
    """Its categorical policy's entropy, a share of its maximum, where one was read."""
    counted: int | None = None
    """The steps counted for it (its optimizers'), None where not known: its loss was read
    on ``len(loss)`` of them."""

    @property
    def falls(self) -> bool:
        """Its loss is expected to fall: the loss-trend rules judge it (a supervised loss of
        a known kind; a value function's in a run whose return fell)."""
        if self.training is Training.SUPERVISED:
            return self.role != UNRECOGNISED
        return self.role == VALUE_HARMED

    @property
    def covered(self) -> bool:
        """Its loss was read on enough of its steps to say anything of it (``COVERED``)."""
        return not self.counted or len(self.loss) >= COVERED * self.counted

    @property
    def judged(self) -> bool:
        """The loss-trend rules judge it: expected to fall, and read on enough steps."""
        return self.falls and self.covered

    def to_json(self) -> JsonObject:
        return {
            "id": self.id,
            "name": self.name,
            "training": str(self.training),
            "role": self.role,
            "why": self.why,
            "optimizers": list(self.optimizers),
            "steps": max(self.counted or 0, len(self.loss)),
            "loss_read": len(self.loss),
            "loss_first": self.loss.values[0] if self.loss.values else None,
            "loss_last": self.loss.values[-1] if self.loss.values else None,
        } | (
            {"entropy_first": self.entropy.values[0], "entropy_last": self.entropy.values[-1]}
            if self.entropy.values
            else {}
        )


@dataclass(frozen=True, slots=True)
class Returns:
    """What the program's own measures say of an agent (``detect.measures``): whether an
    episode return (or a reward) was read, and whether it got worse."""

    read: bool = False
    worsened: bool = False
    said: str = ""
    """The return's trend in words, its numbers (``measures.Trend.said``)."""


def judge(
    meta: RunMeta,
    loss_of: Callable[[int], Series],
    entropy_of: Callable[[int], Series] | None = None,
    counted: int | None = None,
    returns: Returns = Returns(),
) -> list[Objective]:
    """The run's objectives, each with the kind of training it is judged as (see the module
    docstring); ``loss_of(id)``: an objective's loss series (0: the steps table's);
    ``entropy_of(id)``: its policy's entropy, where one was read; ``counted``: the run's
    steps, the first objective's; ``returns``: what the program's return did. The others'
    losses are kept at the run's step when their optimizer stepped, and an optimizer that
    steps with no loss of its own shares the last one's (``collect.step.objectives``): their
    unread steps are not told apart, and not counted."""
    found = _judge(meta, loss_of, returns)
    return [
        replace(
            o,
            entropy=entropy_of(o.id) if entropy_of else o.entropy,
            counted=counted if o.id == 0 else None,
        )
        for o in found
    ]


def _read(fn: JsonObject | None) -> tuple[str | None, str]:
    """What the graph showed of a loss (``collect.graph.mechanics``): its reading and evidence."""
    fn = fn or {}
    reads = fn.get("reads")
    if fn.get("fn") == "actor_critic":
        return "actor_critic", BOTH
    return (str(reads), str(fn.get("evidence") or "")) if reads else (None, "")


def _value(evidence: str, returns: Returns) -> tuple[str, str]:
    """A value objective's role and why: judged by its trend only when the return fell."""
    if returns.worsened:
        return VALUE_HARMED, f"{evidence}: a value function, and {returns.said}"
    return "value", f"{evidence}: a value function, whose loss follows the returns"


def _judge(meta: RunMeta, loss_of: Callable[[int], Series], returns: Returns) -> list[Objective]:
    said = meta.objectives
    if len(said) < 2:
        only = loss_of(0)
        reads, evidence = _read(meta.loss_fn)
        fn = (meta.loss_fn or {}).get("fn")
        if reads == "actor_critic":
            why = BOTH if evidence == BOTH else f"{evidence}: an actor-critic with one optimizer"
            return [Objective(0, "loss", only, Training.REINFORCEMENT, "actor-critic", why)]
        if reads == "policy":
            why = f"{evidence}: a policy gradient"
            return [Objective(0, "loss", only, Training.REINFORCEMENT, "policy", why)]
        if reads == "value" or (reads == "regression" and returns.read):
            role, why = _value(evidence, returns)
            return [Objective(0, "loss", only, Training.REINFORCEMENT, role, why)]
        if fn is None and _signed(only):
            return [Objective(0, "loss", only, Training.REINFORCEMENT, "policy", POLICY)]
        return [Objective(0, "loss", only)]
    by_id = {int(o["id"]): o for o in said}
    names = {k: str(o.get("name") or f"objective {k}") for k, o in by_id.items()}
    fns = {k: (o.get("loss_fn") or {}).get("fn") for k, o in by_id.items()}
    read = {k: _read(o.get("loss_fn")) for k, o in by_id.items()}
    losses = {k: loss_of(k) for k in by_id}
    out: dict[int, Objective] = {}

    def judged(k: int, training: Training, role: str, why: str) -> Objective:
        optimizers = [int(i) for i in by_id[k].get("optimizers") or []]
        return Objective(k, names[k], losses[k], training, role, why, optimizers)

    # adversarial: a loss that reaches another objective's parameters plays against it
    for k, o in by_id.items():
        for other in o.get("reaches") or []:
            if other not in names or (other in out and out[other].role == "generator"):
                continue
            mutual = k in (by_id[other].get("reaches") or [])
            why = (
                f"its loss runs through {names[other]}'s parameters, which another optimizer trains"
            )
            out[k] = judged(k, Training.ADVERSARIAL, "player" if mutual else "generator", why)
            against = (
                f"{names[k]}'s loss runs through its parameters: they train against each other"
                + _critic(by_id[other].get("loss_fn"))
            )
            role = "player" if mutual else "discriminator"
            out.setdefault(other, judged(other, Training.ADVERSARIAL, role, against))
    rest = [k for k in by_id if k not in out]
    policies = [k for k in rest if read[k][0] in ("policy", "actor_critic")] + [
        k for k in rest if not fns[k] and not read[k][0] and _signed(losses[k])
    ]
    for k in policies:
        reads, evidence = read[k]
        if reads == "actor_critic":
            out[k] = judged(k, Training.REINFORCEMENT, "actor-critic", evidence)
        else:
            why = f"{evidence}: a policy gradient" if evidence else POLICY
            out[k] = judged(k, Training.REINFORCEMENT, "policy", why)
    for k in rest:
        if k in out:
            continue
        reads, evidence = read[k]
        regression = reads == "regression" or fns[k] in REGRESSION
        if reads == "value" or (regression and (policies or returns.read)):
            beside = f"beside the policy {names[policies[0]]}" if policies else "in an agent's run"
            evidence = evidence or f"it regresses onto targets {beside}"
            role, why = _value(evidence, returns)
            out[k] = judged(k, Training.REINFORCEMENT, "critic" if role == "value" else role, why)
    for k in by_id:
        if k not in out:
            fn = fns[k]
            if fn or read[k][0] == "regression":
                why = f"a {str(fn).replace('_', ' ')}" if fn else read[k][1]
                out[k] = judged(k, Training.SUPERVISED, "loss", why + ": expected to fall")
            else:
                out[k] = judged(k, Training.SUPERVISED, UNRECOGNISED, UNRECOGNISED_WHY)
    return [out[k] for k in sorted(out)]


def _critic(fn: JsonObject | None) -> str:
    """How a discriminator's loss reads, when its graph showed it (a Wasserstein critic)."""
    fn = fn or {}
    if not fn.get("raw_scores"):
        return ""
    penalty = ", with a gradient penalty" if fn.get("gradient_penalty") else ""
    return f" (a critic: the mean of its raw outputs{penalty})"


def _signed(loss: Series) -> bool:
    """The loss takes both signs (``SIGNED_SHARE`` of its finite steps each)."""
    values = [v for v in loss.values if v == v and abs(v) != float("inf")]
    if len(values) < 10:
        return False
    below = sum(1 for v in values if v < 0) / len(values)
    above = sum(1 for v in values if v > 0) / len(values)
    signs = [v > 0 for v in values if v != 0]
    crossings = sum(1 for a, b in itertools.pairwise(signs) if a != b)
    return below >= SIGNED_SHARE and above >= SIGNED_SHARE and crossings >= CROSSINGS * len(values)
