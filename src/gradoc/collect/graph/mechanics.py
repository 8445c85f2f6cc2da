"""What kind of training a step's losses are, read from their autograd graphs: not from names.

A loss's graph shows how its objective learns, whatever the program calls things:

- **a value objective** regresses outputs onto targets that carry no gradient (made under
  ``no_grad`` or detached: from a target network, the model's own next-state values, the
  rewards): a squared, absolute or Huber error, by ``F.*`` or by hand, with its target side
  outside the graph. When the prediction is gathered at the actions taken (``q.gather(1,
  a)``, ``q[range(n), a]``: DQN's TD error) it is a value objective by itself; a plain
  regression is one in a run that also has a policy or an environment (``detect.training``).
- **a policy objective** weighs log-probabilities by a weight with no gradient (an advantage,
  a return: REINFORCE, A2C), or a probability ratio ``exp(logp - logp_old)`` by one (PPO),
  clipped (``clamp``, ``min``) or not. The log-probabilities are a categorical
  distribution's picked at the actions (``log_softmax``, ``Categorical``'s) or a Gaussian's
  log-density.
- **a critic of raw scores**: the mean of a network's raw outputs, with no log or sigmoid
  (a Wasserstein critic's ``D(real).mean() - D(fake).mean()``, its generator's
  ``-D(G(z)).mean()``); **a gradient penalty**: a gradient made with ``create_graph=True``
  inside the loss (its nodes are a backward's own, ``...BackwardBackward0``).

Several ``backward()`` calls before one optimizer step (a critic's real, fake and penalty
terms) are one objective: their facts are read apart and joined (:func:`join`). Read at a
loss's ``backward()`` (its saved tensors still held), until each objective's first step was
read (``READS_AT_MOST`` losses at most: no later step pays for a walk); each walk stops after
``walk.NODES`` nodes. Nothing is read from the device.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..._util import entry
from ..._util.json_types import JsonObject
from .policy import LOG_PROBS
from .walk import Walk

READS_AT_MOST = 512
"""Losses read at most a run: each objective's first step's (a generator trained after a
hundred critic iterations of three ``backward()`` calls comes after 300)."""
SCORES = ("AddmmBackward0", "MmBackward0", "BmmBackward0", "ConvolutionBackward0")
"""A network's raw outputs: a linear layer's or a convolution's."""
_REGRESSION = {
    "MseLossBackward0": "squared",
    "L1LossBackward0": "absolute",
    "SmoothL1LossBackward0": "Huber",
    "HuberLossBackward0": "Huber",
}
_PICKS = ("GatherBackward0", "IndexBackward0", "SelectBackward0")
_SHAPING = (
    "NegBackward0",
    "SqueezeBackward0",
    "SqueezeBackward1",
    "SqueezeBackward4",
    "UnsqueezeBackward0",
    "ViewBackward0",
    "ReshapeAliasBackward0",
    "UnsafeViewBackward0",
    "SumBackward1",
    "CloneBackward0",
    "ToCopyBackward0",
    "StackBackward0",
    "CatBackward0",
)
"""Nodes between a log-probability and its weight that change nothing of what it is (a
Gaussian policy's joint log-density sums over the action's dimensions; an episode's
log-probabilities stacked: the first is read)."""
_REDUCING = (
    "MeanBackward0",
    "MeanBackward1",
    "SumBackward0",
    "SumBackward1",
    "NegBackward0",
    "CatBackward0",
    "StackBackward0",
    "UnsqueezeBackward0",
    "SqueezeBackward0",
    "SqueezeBackward1",
    "ViewBackward0",
)
"""Nodes above a term that change nothing of what it is: a reduction, a sign, an episode's
terms stacked or concatenated (the first is read: they are alike)."""


def _below(node: Any) -> list[Any]:
    return [fn for fn, _ in node.next_functions]


def _strip(node: Any, names: tuple[str, ...] = _SHAPING) -> Any:
    for _ in range(8):
        if node is None or node.name() not in names or not node.next_functions:
            return node
        node = node.next_functions[0][0]
    return node


def _constant_beside(node: Any) -> Any:
    """The one input with a gradient of a binary node whose other input has none (``x * w``
    with ``w`` made without gradient), else None."""
    below = _below(node)
    if len(below) != 2 or (below[0] is None) == (below[1] is None):
        return None
    return below[0] if below[0] is not None else below[1]


def _log_probs(node: Any) -> bool:
    """``node`` is log-probabilities of actions: a categorical distribution's picked at
    them, or a Gaussian's log-density."""
    node = _strip(node)
    if node is None:
        return False
    if node.name() in _PICKS:
        inner = _strip(_below(node)[0] if node.next_functions else None)
        if inner is None:
            return False
        return inner.name() in LOG_PROBS or (
            inner.name() == "SubBackward0"
            and any(c is not None and c.name() == "LogsumexpBackward0" for c in _below(inner))
        )
    return _density(node)


def _density(node: Any) -> bool:
    """A Gaussian's log-density, ``-(a - mu)**2 / (2 var) - log(sigma) - c``: a difference
    over a negated square divided, within a few nodes."""
    names: set[str] = set()
    todo, seen = [node], 0
    while todo and seen < 12:
        n = todo.pop(0)
        seen += 1
        names.add(n.name())
        todo.extend(c for c in _below(n) if c is not None)
    return (
        node.name().startswith("SubBackward")
        and {
            "NegBackward0",
            "PowBackward0",
            "DivBackward0",
        }
        <= names
    )


def _ratio(node: Any) -> bool:
    """``exp(logp - logp_old)`` with ``logp_old`` made without gradient."""
    node = _strip(node, ("ClampBackward1", "ClampBackward0", *_SHAPING))
    if node is None or node.name() != "ExpBackward0" or not node.next_functions:
        return False
    sub = node.next_functions[0][0]
    if sub is None or sub.name() != "SubBackward0":
        return False
    inner = _constant_beside(sub)
    return inner is not None and _log_probs(inner)


@dataclass(slots=True)
class Facts:
    """What one step's losses show (see the module docstring)."""

    regression: str | None = None
    """"squared", "absolute", "Huber": a regression onto targets with no gradient."""
    gathered: bool = False
    """... whose prediction is picked at the actions taken."""
    policy: str | None = None
    """"ratio" (PPO's) or "log-probabilities", weighed by a weight with no gradient."""
    clipped: bool = False
    scores: bool = False
    """A term is the mean of a network's raw outputs."""
    penalty: bool = False
    """A gradient made with ``create_graph=True`` is in the loss."""
    other: bool = False
    """A term of none of these kinds (a cross-entropy, a reconstruction)."""
    storages: set[int] = field(default_factory=set)
    """Storages of the tensors without gradient that the graph saved at its layers (the
    weights of a model frozen while another trains through it)."""

    def to_json(self) -> JsonObject:
        """``loss_fn['reads']``: what was recognised, and from what evidence."""
        reads, why = self.said()
        out: JsonObject = {"reads": reads, "evidence": why} if reads else {}
        if self.penalty:
            out["gradient_penalty"] = True
        if self.scores:
            out["raw_scores"] = True
        return out

    def said(self) -> tuple[str | None, str]:
        if self.policy and self.regression:
            return "actor_critic", f"{self._policy()}, beside {self._regression()}"
        if self.policy:
            return "policy", self._policy()
        if self.regression and self.gathered:
            return "value", self._regression()
        if self.scores:
            penalty = ", with a gradient penalty" if self.penalty else ""
            return "raw_scores", f"the mean of a network's raw outputs (no log or sigmoid){penalty}"
        if self.regression and not self.other:
            return "regression", self._regression()
        return None, ""

    def _policy(self) -> str:
        if self.policy == "ratio":
            clip = ", clipped," if self.clipped else ""
            return f"a probability ratio exp(logp - logp_old){clip} weighed by advantages"
        return "log-probabilities of the actions taken weighed by a weight with no gradient"

    def _regression(self) -> str:
        at = " of outputs picked at the actions taken" if self.gathered else ""
        return f"a {self.regression} regression{at} onto targets with no gradient"


def _terms(node: Any, out: list[Any]) -> list[Any]:
    """The terms of a sum, each below the reductions and constant factors above it."""
    for _ in range(12):
        if node is None:
            return out
        name = node.name()
        if name in ("AddBackward0", "SubBackward0") and len(out) < 16:
            for c in _below(node):
                _terms(c, out)
            return out
        if name in _REDUCING and node.next_functions:
            node = node.next_functions[0][0]
            continue
        if name in ("MulBackward0", "DivBackward0"):
            inner = _constant_beside(node)
            if inner is not None and not _log_probs(inner) and not _ratio(inner):
                node = inner  # 0.5 * value_loss, loss / n
                continue
        break
    if node is not None:
        out.append(node)
    return out


def read(root: Any, facts: Facts) -> None:
    """Add what the loss whose node is ``root`` shows to ``facts``."""
    if root is None:
        return
    for term in _terms(root, []):
        _term(term, facts)
    _walk(root, facts)


def _term(node: Any, facts: Facts) -> None:
    name = node.name()
    if name in _REGRESSION or _by_hand(node):
        below = _below(node)
        if name in _REGRESSION and (len(below) < 2 or below[1] is not None):
            facts.other = True  # both sides learn: no fixed target
            return
        facts.regression = facts.regression or _REGRESSION.get(name, "squared")
        prediction = below[0] if name in _REGRESSION else _by_hand(node)
        if prediction is not None and _strip(prediction).name() in _PICKS:
            facts.gathered = True
        return
    if name == "MinimumBackward0":  # PPO's min(ratio * adv, clip(ratio) * adv)
        for c in _below(node):
            if c is not None:
                _term(c, facts)
        facts.clipped = facts.clipped or facts.policy == "ratio"
        return
    if name == "MulBackward0":
        inner = _constant_beside(node)
        if inner is not None and _ratio(inner):
            facts.policy = "ratio"
            facts.clipped = facts.clipped or _strip(inner).name().startswith("ClampBackward")
            return
        if inner is not None and _log_probs(inner):
            facts.policy = facts.policy or "log-probabilities"
            return
    if _strip(node).name() in SCORES:
        facts.scores = True
        return
    facts.other = True


def _by_hand(node: Any) -> Any:
    """The prediction of a squared or absolute difference written by hand, against a side
    with no gradient (``(q - y) ** 2``, ``(q - y).abs()``): the node of ``q``; else None."""
    if (
        node.name() not in ("PowBackward0", "AbsBackward0", "MulBackward0")
        or not node.next_functions
    ):
        return None
    if node.name() == "PowBackward0" and getattr(node, "_saved_exponent", None) != 2:
        return None
    sub = node.next_functions[0][0]
    if sub is None or sub.name() != "SubBackward0":
        return None
    if node.name() == "MulBackward0" and node.next_functions[1][0] is not sub:
        return None
    return _constant_beside(sub)


def _walk(root: Any, facts: Facts) -> None:
    """A gradient penalty's nodes, and the storages saved at layers fed by a tensor with no
    gradient, within ``walk.NODES`` nodes."""
    for node in Walk([root]):
        name = node.name()
        if "BackwardBackward" in name:
            facts.penalty = True
        if name in SCORES and None in _below(node):
            for attr in ("_saved_mat2", "_saved_self", "_saved_weight"):
                saved = getattr(node, attr, None)
                if saved is not None and hasattr(saved, "untyped_storage"):
                    facts.storages.add(saved.untyped_storage().data_ptr())


def reads(root: Any, facts: Facts) -> None:
    """:func:`read`, never raising: a graph of a shape not foreseen is read as nothing."""
    try:
        read(root, facts)
    except (RuntimeError, AttributeError, TypeError, IndexError):
        return


class Penalties:
    """The gradients the program makes to differentiate again (``autograd.grad`` with
    ``create_graph=True``), and whether a ``backward()`` reached each before the next
    optimizer step: a hook on the gradient, which fires when a loss built on it is
    backpropagated. A penalty computed and never handed to ``backward()`` (the line that
    backpropagates it commented out) is that hook never firing."""

    __slots__ = ("made", "open", "unbacked")

    def __init__(self) -> None:
        self.made = 0
        self.open: list[list[Any]] = []
        """[where it was made, what reached it] of the step's gradients."""
        self.unbacked: JsonObject | None = None

    WATCHED = 64
    """Gradients watched at most a run: a penalty is dropped from its first step or never."""

    def wanted(self) -> bool:
        return self.unbacked is None and self.made < self.WATCHED

    def watch(self, tensors: Any, at: JsonObject | None) -> None:
        first = next((t for t in tensors if getattr(t, "requires_grad", False)), None)
        if first is None:
            return
        reached: list[Any] = []  # a gradient through it appends it: backpropagated
        entry.tensor_hook(first, reached.append)
        self.made += 1
        self.open.append([at, reached])

    def step_ended(self, objective: int) -> JsonObject | None:
        """The step ended: the first penalty of a step that no ``backward()`` reached, once
        a run (``meta['penalties']``), else None."""
        entries, self.open = self.open, []  # (the gradients appended go with them)
        if self.unbacked is not None or not entries or any(reached for _, reached in entries):
            return None
        self.unbacked = {**(entries[0][0] or {}), "objective": objective}
        return {"made": self.made, "unbacked": self.unbacked}
