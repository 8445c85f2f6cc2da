"""Which objective each loss trains: one loss series per objective.

A program with one optimizer has one objective, and its loss is the steps table's. A program
with several (an actor and a critic, a generator and a discriminator) hands ``backward()``
one loss for each, and each loss trains the optimizer that steps after it: the losses
backpropagated since the last step of any watched optimizer are that optimizer's. An
optimizer that steps with no new loss shares the last one's (``(actor + critic).backward()``
then both steps: one objective of two optimizers). Attribution is by the order of calls:
nothing is read from the device, and a run with one optimizer does none of this.

The first objective is the primary optimizer's (the one that counts the run's steps): its
loss stays ``steps.loss``. The others' losses are recorded in ``objective_losses`` at the
step in progress when their optimizer stepped, and ``meta['objectives']`` names them: after
what the program calls the models their optimizers train (``critic``, ``generator``), and
with the objectives each one's loss reaches through the autograd graph (a generator's loss
runs through the discriminator: that is what makes two objectives a game; read once, at an
objective's first step, from the graph's leaves).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from torch import Tensor
from torch.optim import Optimizer

from ..._util.json_types import JsonObject
from ..._util.objects import IdMap
from ..attach import taps
from ..graph import REACH, graph_leaves, losses, mechanics

if TYPE_CHECKING:
    from torch import nn

    from ..context import Internal, InternalWatched
    from ..probes import WatchedOptimizer


class Stepping(Protocol):
    """What crediting a step's losses reads of the run's steps (``steps.Steps``)."""

    count: int
    several: bool
    objectives: Objectives
    targets: IdMap[Optimizer, WatchedOptimizer]
    watched: InternalWatched
    run: Internal


@dataclass(slots=True)
class Objective:
    """One objective: the optimizers its loss trains, what it reaches."""

    id: int
    optimizers: list[Optimizer]
    name: str
    fn: JsonObject
    """What its loss function is (``losses.kind``)."""
    reached: frozenset[int] = frozenset()
    """ids of the parameters its first loss reaches through the autograd graph."""
    saved: frozenset[int] = frozenset()
    """Storages its first step's losses saved at layers with frozen weights
    (``mechanics.Facts.storages``): a model it runs through while another's optimizer has
    its parameters' ``requires_grad`` off (a WGAN's critic, frozen for the generator's
    step)."""


@dataclass(slots=True)
class Objectives:
    """The run's objectives, learnt as its optimizers step (see the module docstring)."""

    primary: Optimizer | None = None
    of: IdMap[Optimizer, Objective] = field(default_factory=IdMap)
    all: list[Objective] = field(default_factory=list)
    pending: list[tuple[int, int, Tensor]] = field(default_factory=list)
    """(step, objective id, loss on the device) of the objectives other than the primary's,
    waiting for the next transfer."""
    _last: tuple[Optimizer, list[losses.Micro]] | None = None

    def stepped(
        self,
        target: WatchedOptimizer,
        micros: list[losses.Micro],
        step: int,
        name: str,
        facts: mechanics.Facts | None = None,
    ) -> tuple[list[losses.Micro], bool]:
        """``target``'s optimizer stepped after the ``micros`` (the losses backpropagated
        since any optimizer last stepped): the losses its step is credited with (its own,
        or the last optimizer's that it shares), and whether the objective is new."""
        optimizer = target.optimizer
        shared = not micros and self._last is not None
        if micros:
            self._last = (optimizer, micros)
        elif self._last is not None:
            micros = self._last[1]
        if not micros:
            return micros, False
        new = False
        objective = self.of.get(optimizer)
        if objective is None:
            new = True
            if shared and self._last is not None and self._last[0] in self.of:
                objective = self.of[self._last[0]]
                objective.optimizers.append(optimizer)
                if name not in objective.name:
                    objective.name = f"{objective.name}+{name}"
                if optimizer is self.primary and objective.id != 0:
                    self._renumber(objective)
            else:
                first = micros[0].node
                fn = losses.kind(first) | (facts.to_json() if facts is not None else {})
                saved = frozenset(facts.storages) if facts is not None else frozenset()
                objective = Objective(
                    self._next_id(optimizer), [optimizer], name, fn, _reach(first), saved
                )
                self.all.append(objective)
            self.of[optimizer] = objective
        if objective.id != 0 and not shared:
            self.pending.append((step, objective.id, losses.mean(micros)))
        return micros, new

    def credit(
        self,
        target: WatchedOptimizer,
        micros: list[losses.Micro],
        steps: Stepping,
        facts: mechanics.Facts | None = None,
    ) -> list[losses.Micro]:
        """``target``'s optimizer stepped: the losses it trains (its own since the last step
        of any, or the last one's it shares); the run log hears of a new objective."""
        optimizers = [o for o, t in steps.targets.items() if not t.manual]
        name = _trains(steps.watched.prefixes, target, optimizers)
        micros, new = self.stepped(target, micros, steps.count, name, facts)
        objective = self.of.get(target.optimizer)
        if new and objective is not None:
            _watch_unheld(objective, steps)
        if new and self.several():
            index = IdMap((o, i) for i, o in enumerate(optimizers))
            steps.run.set_meta(objectives=self.describe(index))
        return micros

    def _next_id(self, optimizer: Optimizer) -> int:
        if optimizer is self.primary:
            return 0
        return 1 + sum(1 for o in self.all if o.id != 0)

    def _renumber(self, objective: Objective) -> None:
        """The primary optimizer shares a loss first credited to another: that objective is
        the primary's (its losses are the steps table's)."""
        old = objective.id
        for o in self.all:
            if o.id > old:
                o.id -= 1
        objective.id = 0
        self.pending = [p for p in self.pending if p[1] != old]

    def id_of(self, optimizer: Optimizer) -> int:
        """The objective ``optimizer`` trains (0: the only one, or the primary's)."""
        objective = self.of.get(optimizer)
        return objective.id if objective is not None else 0

    def take(self) -> list[tuple[int, int, Tensor]]:
        taken, self.pending = self.pending, []
        return taken

    def several(self) -> bool:
        return len(self.all) > 1

    def unseen(self, optimizers: int) -> bool:
        """Fewer than ``optimizers`` stepped with a loss (their own or one they share)."""
        return sum(len(o.optimizers) for o in self.all) < optimizers

    def describe(self, index_of: IdMap[Optimizer, int]) -> list[JsonObject]:
        """``meta['objectives']``: each objective's id, name, optimizers (their watched
        index), loss function, and the other objectives whose parameters its loss reaches."""
        params = {o.id: _params(o) for o in self.all}
        storages = {o.id: _storages(o) for o in self.all}
        said: list[JsonObject] = []
        for o in sorted(self.all, key=lambda o: o.id):
            reaches = [
                k
                for k, ids in params.items()
                if k != o.id and (ids & o.reached or storages[k] & o.saved)
            ]
            said.append(
                {
                    "id": o.id,
                    "name": o.name,
                    "optimizers": [index_of[opt] for opt in o.optimizers if opt in index_of],
                    "loss_fn": o.fn,
                    "reaches": reaches,
                }
            )
        return said


def _trains(
    prefixes: IdMap[nn.Module, str], target: WatchedOptimizer, optimizers: list[Optimizer]
) -> str:
    """What an optimizer trains, as the program calls it: its models' names (the roots'
    prefixes, ``critic``), else its place among the optimizers."""
    named = [p for p in prefixes.values() if p]
    names = dict.fromkeys(p[:-1] for w in target.params for p in named if w.name.startswith(p))
    if names:
        return "+".join(names)
    place = optimizers.index(target.optimizer) if target.optimizer in optimizers else 0
    return f"optimizer {place}"


def _watch_unheld(objective: Objective, steps: Stepping) -> None:
    """Watch the models that ``objective``'s loss trains through and no optimizer holds (a
    generator whose optimizer was given the discriminator's parameters): a module a watched
    loss reaches is watched, held or not, so the set-up check sees their gradients go unused.
    Under ``gradoc run`` only, where the modules that ran are known; once per objective."""
    find = steps.run.find_owners
    if find is None:
        return
    held = taps.param_ids({*steps.targets, *taps.live_optimizers()})
    unheld = set(objective.reached) - held
    owners = find(unheld) if unheld else []
    if owners:
        steps.watched.watch_modules(steps.watched.roots(owners, several=True))


def _params(objective: Objective) -> set[int]:
    return taps.param_ids(objective.optimizers)


def _storages(objective: Objective) -> set[int]:
    """The storages of the parameters ``objective``'s optimizers train."""
    return {
        p.untyped_storage().data_ptr()
        for opt in objective.optimizers
        for group in opt.param_groups
        for p in group["params"]
    }


def _reach(node: Any) -> frozenset[int]:
    """ids of the leaf tensors (parameters) a loss's graph accumulates gradients into."""
    return frozenset(id(t) for t in graph_leaves([node], REACH))
