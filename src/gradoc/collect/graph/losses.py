"""The loss as the program computes it: read through its wrappers, and seen where it is made.

A step's loss is what the program optimises for that step. Programs rarely hand that
number to ``backward()`` as it is:

- a loss scaler multiplies it (``GradScaler.scale``: the tap says which tensor it scaled);
- gradient accumulation divides each micro-batch's loss by the number of micro-batches
  (``loss / 4``, nanoGPT, Hugging Face's Trainer) before its backward: when every
  micro-batch of a step was divided by the step's number of ``backward()`` calls, the
  step's loss is their sum (the mean of the undivided losses), else their mean (the
  divisors are compared on the host, when the step's values are read: no extra read);
- the loss function is wrapped (a division, label smoothing's sum of two terms), which
  hides the cross-entropy whose number of classes says where its chance level lies.

All of it is read from the autograd graph's nodes and the constants they saved: no device
read. :func:`read` reads one ``backward()``'s loss, :func:`step_values` and :func:`combine`
make a step's, :func:`kind` names the loss function.

A loss that never reaches ``backward()`` (a loop that checks it and stops: ``if not
torch.isfinite(loss): break``) is seen where the program reads it or where the model
returns it: :class:`Unbacked` keeps those reads until a ``backward()`` shows whether they
were backpropagated.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ..._util.json_types import JsonObject
from ..._util.tree import output_loss
from .policy import LOG_PROBS
from .walk import Walk

_NLL = ("NllLossBackward0", "NllLoss2DBackward0")
_BINARY = ("BinaryCrossEntropyWithLogitsBackward0", "BinaryCrossEntropyBackward0")
_REGRESSION = {
    "MseLossBackward0": "mse_loss",
    "L1LossBackward0": "l1_loss",
    "SmoothL1LossBackward0": "smooth_l1_loss",
    "HuberLossBackward0": "huber_loss",
    "KlDivBackward0": "kl_div",
}
_SEARCH = 64
"""Autograd nodes looked at from a ``backward()``'s root, at most, to match losses the program
read before (a loss inside ``ce + reg``, divided, scaled): the top of the graph only."""


@dataclass(slots=True)
class Micro:
    """One ``backward()``'s loss: its value (a detached scalar on the device, loss scaling
    undone) and the constant it was divided by before the backward, if any (a one-element
    tensor: its value is compared on the host, with the step's other values)."""

    value: Tensor
    divisor: Tensor | None
    node: Any
    """The loss's own autograd node (below the scaler and the division)."""
    scaled: bool
    entropy: Tensor | None = None
    """Its policy's entropy, a share of its maximum, on the device, where it was read
    (``collect.graph.policy``); taken once the step is credited."""
    host: float | None = None
    """Its value, once read on the host (on the CPU, where that waits for nothing): read
    once, at its ``backward()``, by whichever check reads it first."""


def divided(node: Any) -> tuple[Tensor, Any] | None:
    """``loss / c`` with ``c`` a one-element tensor that needs no gradient (a Python number
    is saved as one): (c, the node below); None otherwise. Nothing is read."""
    if node.name() != "DivBackward0":
        return None
    try:
        nexts = node.next_functions
        if len(nexts) != 2 or nexts[1][0] is not None or nexts[0][0] is None:
            return None
        other = node._saved_other
    except (AttributeError, RuntimeError):
        return None
    if not isinstance(other, Tensor) or other.numel() != 1:
        return None
    return other.detach().reshape(()), nexts[0][0]


def read(loss: Tensor, scaled: dict[int, tuple[Any, Tensor]], value: Tensor | None = None) -> Micro:
    """The loss of one ``backward(loss)``; ``scaled``: id(node of a scaled loss) -> (that
    node, the loss before scaling), what the scaler tap saw; ``value``: the loss a
    non-scalar ``loss`` stands for (``taps.handed``)."""
    node = loss.grad_fn
    if value is not None:
        return Micro(value, None, node, False)
    before = scaled.pop(id(node), None) if node is not None else None
    was_scaled = before is not None and before[0] is node
    if was_scaled:
        loss = before[1]  # type: ignore[index]
        node = loss.grad_fn
    divisor = None
    if node is not None:
        found = divided(node)
        if found is not None:
            divisor, node = found
    value = loss.detach()
    return Micro(value if value.dim() == 0 else value.reshape(()), divisor, node, was_scaled)


def step_values(micros: list[Micro]) -> tuple[Tensor, list[Tensor | None] | None]:
    """A step's micro-batch losses (n values, or one scalar) on the device, and their
    divisors (None where none; None for all when no micro-batch was divided), for the host
    to combine when the step is read (:func:`combine`): each divisor is a part of that read,
    wherever it lies (a Python number's is on the CPU)."""
    if len(micros) == 1 and micros[0].divisor is None:
        return _float(micros[0].value), None
    values = torch.stack([m.value.float() for m in micros])
    if all(m.divisor is None for m in micros):
        return values, None
    return values, [m.divisor for m in micros]


def combine(values: list[float], divisors: list[float] | None) -> tuple[float, bool | None]:
    """The step's loss from its micro-batches' (on the host): their sum when each was
    divided by their number (gradient accumulation: the mean of the undivided losses), else
    their mean; and whether a division was undone (None: no division)."""
    n = len(values)
    if divisors is not None and all(d == n for d in divisors):
        return math.fsum(values), True
    return math.fsum(values) / n, (None if divisors is None else False)


def _float(t: Tensor) -> Tensor:
    """``t`` at least float32 (a float16 loss's values are compared in float32); no op for
    one that is (this runs every step)."""
    return t if t.dtype in (torch.float32, torch.float64) else t.float()


def mean(micros: list[Micro]) -> Tensor:
    """The step's micro-batch losses averaged on the device (finite exactly when each is)."""
    if len(micros) == 1:
        return _float(micros[0].value)
    return torch.stack([m.value.float() for m in micros]).mean()


def kind(node: Any) -> JsonObject:
    """What the loss function is, from the loss's own node (below a loss scaler and a
    division, never below a multiplication: ``2 * ce`` has no chance level of ln k): ``{"node":
    "NllLossBackward0", "fn": "cross_entropy", "classes": 65}`` for a cross-entropy over 65
    classes (its loss at a uniform prediction, chance, is ln 65), also label-smoothed
    (``"label_smoothing": true``: its chance level is ln 65 too) and with its
    ``ignore_index``; ``{"node": ...}`` alone for anything else (no chance level)."""
    if node is None:
        return {"node": None}
    name = node.name()
    if name in _NLL:
        return {"node": name, "fn": "cross_entropy", **_nll(node), **_fed(node, "Softmax")}
    if name in _BINARY:
        fed = _fed(node, "Sigmoid") if "Logits" in name else {}
        return {"node": name, "fn": "binary_cross_entropy", "classes": 2, **fed}
    if name in _REGRESSION:
        return {"node": name, "fn": _REGRESSION[name]}
    written = by_hand(node)
    if written is not None:
        return {"node": name, "fn": written, "by_hand": True}
    likelihood = log_likelihood(node)
    if likelihood is not None:
        return {"node": name, "fn": "cross_entropy", "classes": likelihood, "by_hand": True}
    smoothed = _label_smoothed(node)
    if smoothed is not None:
        return {"node": smoothed.name(), "fn": "cross_entropy", **_nll(smoothed)} | {
            "label_smoothing": True
        }
    if _actor_critic(node):
        return {"node": name, "fn": "actor_critic"}
    return {"node": name}


_REDUCE = ("MeanBackward0", "MeanBackward1", "SumBackward0", "SumBackward1")
_CONSTANT_SCALE = ("MulBackward0", "DivBackward0")


def _below(node: Any) -> list[Any]:
    return [fn for fn, _ in node.next_functions]


def by_hand(node: Any) -> str | None:
    """A regression written by hand, read from its nodes whatever the spelling: the mean or
    sum of a squared difference (``(a - b).pow(2)``, ``(a - b) ** 2``, ``torch.square(a -
    b)``, ``(a - b) * (a - b)``) is ``"mse_loss"``, of an absolute one ``"l1_loss"``; a
    constant factor or divisor above it (``0.5 * ...``, ``... / n``) changes nothing. None
    for anything else. Nothing is read from the device."""
    for _ in range(2):  # 0.5 * (...).mean() / n
        below = _below(node) if node.name() in _CONSTANT_SCALE else []
        if len(below) != 2 or below[1] is not None or below[0] is None:
            break
        node = below[0]
    if node.name() not in _REDUCE or not node.next_functions:
        return None
    inner = node.next_functions[0][0]
    if inner is None:
        return None
    parts = _below(inner)
    if not parts or parts[0] is None or parts[0].name() != "SubBackward0":
        return None
    name = inner.name()
    if name == "PowBackward0" and getattr(inner, "_saved_exponent", None) == 2:
        return "mse_loss"
    if name == "AbsBackward0":
        return "l1_loss"
    if name == "MulBackward0" and len(parts) == 2 and parts[1] is not None:
        same = parts[0] is parts[1] or (
            parts[1].name() == "SubBackward0"
            and [n.name() if n else None for n in _below(parts[0])]
            == [n.name() if n else None for n in _below(parts[1])]
        )
        return "mse_loss" if same else None
    return None


_PICK = ("IndexBackward0", "GatherBackward0")
_STRIPPED = ("NegBackward0", "MeanBackward0", "MeanBackward1")


def log_likelihood(node: Any) -> int | None:
    """A cross-entropy written by hand, and its number of classes: minus the mean of the
    log-probabilities picked at the targets (``-log_softmax(x)[range(n), y].mean()``,
    ``-torch.log(softmax(x)).gather(1, y).mean()``, ``-prob[range(n), y].log().mean()`` with
    ``prob`` a softmax written out), k the softmax's width; or a binary one,
    ``-(y * log(p) + (1 - y) * log(1 - p)).mean()``, 2 classes. A mean only, with no factor
    above it: a sum or ``2 * ce`` has no chance level of ln k. None for anything else (a
    policy's log-probabilities weighed by an advantage are no cross-entropy)."""
    negated = False
    for _ in range(3):  # -(...).mean() or (-...).mean(): a mean, so that ln k is its chance
        below = _below(node)
        if not below or below[0] is None or node.name() not in _STRIPPED:
            break
        negated, node = negated or node.name() == "NegBackward0", below[0]
    if not negated:
        return None
    if node.name() == "LogBackward0":  # -prob[range(n), y].log().mean(): picked, then logged
        pick = _below(node)[0] if node.next_functions else None
        return _picked_probabilities(pick) if pick is not None else None
    if node.name() in _PICK:
        inner = _below(node)[0] if node.next_functions else None
        if inner is not None and inner.name() == "LogBackward0":
            inner = _below(inner)[0] if inner.next_functions else None
            if inner is None or not inner.name().startswith("SoftmaxBackward"):
                return None
        elif inner is None or not inner.name().startswith("LogSoftmaxBackward"):
            return None
        try:
            result, dim = inner._saved_result, int(inner._saved_dim)
        except (AttributeError, RuntimeError, TypeError):
            return None
        dim = dim - (1 << 64) if dim >= 1 << 63 else dim  # saved as unsigned
        if not isinstance(result, Tensor) or not -result.dim() <= dim < result.dim():
            return None
        return int(result.shape[dim])
    if node.name() == "AddBackward0":
        terms = [t for t in _below(node) if t is not None]
        logs = [
            t
            for t in terms
            if t.name() == "MulBackward0"
            and any(c is not None and c.name() == "LogBackward0" for c in _below(t))
        ]
        return 2 if len(terms) == 2 and len(logs) == 2 else None
    return None


def _picked_probabilities(pick: Any) -> int | None:
    """The classes of a 2-D softmax (``softmax(x)``, or ``exp(x) / exp(x).sum(1)`` written
    out) indexed at the targets: its width."""
    if pick.name() != "IndexBackward0":
        return None
    source = _below(pick)[0] if pick.next_functions else None
    written = (
        source is not None
        and source.name() == "DivBackward0"
        and any(c is not None and c.name() == "ExpBackward0" for c in _below(source))
    )
    if source is None or not (source.name().startswith("SoftmaxBackward") or written):
        return None
    sizes = getattr(pick, "_saved_self_sym_sizes", None)
    return int(sizes[1]) if isinstance(sizes, tuple) and len(sizes) == 2 else None


_LOG_PROBS = (*LOG_PROBS, "LogsumexpBackward0")
"""Nodes of a categorical policy's log-probabilities (``collect.graph.policy``):
``Categorical(logits=...)`` normalises its logits, ``Categorical(probs=...)`` takes their log;
``log_prob`` then gathers the actions taken."""
_TERMS = 8
"""Terms of a sum looked at, at most (policy + value + an entropy bonus)."""


def _terms(node: Any, found: list[Any]) -> list[Any]:
    """The terms of a sum (``a + b - c``): the nodes below its additions."""
    if node.name() in ("AddBackward0", "SubBackward0") and len(found) < _TERMS:
        for fn, _ in node.next_functions:
            if fn is not None:
                _terms(fn, found)
    elif len(found) < _TERMS:
        found.append(node)
    return found


def _names_below(node: Any) -> set[str]:
    """The names of the first ``_SEARCH`` nodes below ``node`` (each node once), depth first."""
    return {n.name() for n in Walk([node], _SEARCH)}


def _actor_critic(node: Any) -> bool:
    """One loss for an actor and a critic: a sum with a term that weighs a policy's
    gathered log-probabilities (``-log_prob * advantage``) and a term that regresses a value
    (``mse_loss``, ``smooth_l1_loss``, or one written by hand: :func:`by_hand`). Each term is
    read apart, its first ``_SEARCH`` nodes (an episode's losses stacked: the first few steps
    of each term are enough)."""
    if node.name() not in ("AddBackward0", "SubBackward0"):
        return False
    terms = _terms(node, [])
    names = [_names_below(t) for t in terms]
    value = any(n & set(_REGRESSION) for n in names) or any(by_hand(t) for t in terms)
    policy = any(
        {"GatherBackward0", "MulBackward0"} <= n and n & set(_LOG_PROBS) and not n & set(_NLL)
        for n in names
    )
    return value and policy


def _fed(node: Any, squash: str) -> JsonObject:
    """``{"fed": "softmax"}`` when a loss that takes logits was given probabilities: its input
    went through ``squash`` (``cross_entropy(softmax(x))``, whose log_softmax sits on the
    softmax; ``binary_cross_entropy_with_logits(sigmoid(x))``); ``{"fed": "probabilities"}``
    when ``nll_loss``, which takes log-probabilities, was given a softmax's output itself."""
    below = _through(node.next_functions[0][0] if node.next_functions else None)
    logged = below is not None and below.name().startswith("LogSoftmaxBackward")
    if logged and below is not None:
        below = _through(below.next_functions[0][0] if below.next_functions else None)
    if below is not None and below.name().startswith(squash + "Backward"):
        if squash == "Softmax" and not logged:  # nll_loss(softmax(x)): no log at all
            return {"fed": "probabilities"}
        return {"fed": squash.lower()}
    if squash == "Softmax" and not logged and _scores(below):
        return {"fed": "logits"}  # nll_loss(linear(x)): minus a raw score, with no floor
    return {}


def _scores(node: Any) -> bool:
    """``node`` makes raw scores: a linear layer, a convolution, a graph's propagation, or one
    of them plus a bias."""
    if node is None:
        return False
    if node.name().startswith("AddBackward"):
        return any(n is not None and _LAYER.fullmatch(n.name()) for n, _ in node.next_functions)
    return bool(_LAYER.fullmatch(node.name()))


_SHAPING = re.compile(
    r"(View|Reshape|Unsafe(View|Reshape)?|Squeeze|Unsqueeze|Permute|Transpose|T|Clone|Select|"
    r"Slice|Index|Narrow|Alias|Contiguous|ToCopy|NativeDropout|Dropout|FeatureDropout)Backward\d*"
)
"""Nodes between a loss and what feeds it that leave its values what they were, or drop some:
the training rows indexed out of a graph's nodes, a dropout, a view (a product with a tensor
that has no gradient, a dropout's mask on the CPU, is followed too)."""
_LAYER = re.compile(r"(Addmm|Mm|Bmm|Linear|Convolution|SparseAddmm)Backward\d*")
"""Nodes that make raw scores (a linear layer, a convolution, a graph's propagation)."""
THROUGH = 8
"""Shaping nodes followed at most below a loss."""


def _through(node: Any) -> Any:
    """``node``, or the first node below the shaping ones under it (:data:`_SHAPING`)."""
    for _ in range(THROUGH):
        if node is None:
            return None
        below = [n for n, _ in node.next_functions if n is not None]
        masked = node.name().startswith("MulBackward") and len(below) == 1  # x * a constant mask
        if not (masked or _SHAPING.fullmatch(node.name())):
            return node
        node = below[0] if below else None
    return node


def _nll(node: Any) -> JsonObject:
    facts: JsonObject = {}
    try:
        saved = getattr(node, "_saved_self", None)
    except RuntimeError:  # read after its backward freed what it saved
        saved = None
    if isinstance(saved, Tensor) and saved.dim() >= 2:
        facts["classes"] = int(saved.shape[1])
    ignore = getattr(node, "_saved_ignore_index", None)
    if isinstance(ignore, int):
        ignore = ignore - (1 << 64) if ignore >= 1 << 63 else ignore  # saved as unsigned
        if ignore != -100:  # PyTorch's default: not worth a word
            facts["ignore_index"] = ignore
    return facts


def _label_smoothed(node: Any) -> Any:
    """``cross_entropy(..., label_smoothing=e)``: ``(1 - e) * nll + e * smooth``, an
    ``AddBackward0`` of two ``MulBackward1``; the NLL node, else None."""
    if node.name() != "AddBackward0":
        return None
    parts = [fn for fn, _ in node.next_functions]
    if len(parts) != 2 or any(p is None or p.name() != "MulBackward1" for p in parts):
        return None
    below = parts[0].next_functions[0][0]
    return below if below is not None and below.name() in _NLL else None


@dataclass(slots=True)
class Seen:
    """A scalar with a graph that the program read (or its model returned) in a step."""

    node: Any
    value: float | Tensor
    """Its value when the read gave it (a non-finite float), else a detached scalar."""
    how: str
    step: int
    backpropagated: bool = False
    """It reached ``backward()``, but its step never ended (the program stopped first)."""


@dataclass(slots=True)
class Unbacked:
    """Losses the program read, waiting for a ``backward()`` to show whether they were
    backpropagated; those that were not are :meth:`take`-n for the step's packet."""

    held: list[Seen] = field(default_factory=list)
    unused: list[Seen] = field(default_factory=list)
    limit: int = 8

    def add(self, t: Tensor, value: float | None, how: str, step: int) -> None:
        node = t.grad_fn
        if any(s.node is node for s in self.held):
            return  # read twice (printed and checked): one loss
        if len(self.held) >= self.limit:
            return
        held = value if value is not None else t.detach().reshape(())
        self.held.append(Seen(node, held, how, step))

    def backward(self, root: Any) -> list[Seen]:
        """A ``backward()`` from ``root``: what it reaches was backpropagated (returned);
        what the program read and this backward does not reach was not (it moved on)."""
        if not self.held:
            return []
        reached = _top(root, {id(s.node) for s in self.held})
        self.unused += [s for s in self.held if id(s.node) not in reached]
        backpropagated = [s for s in self.held if id(s.node) in reached]
        self.held = []
        return backpropagated

    def close(self) -> None:
        """The run ends: nothing read since the last ``backward()`` was backpropagated."""
        self.unused += self.held
        self.held = []

    def take(self) -> list[Seen]:
        taken, self.unused = self.unused, []
        return taken


def _top(root: Any, wanted: set[int]) -> set[int]:
    """Which of the ``wanted`` node ids lie within the top ``_SEARCH`` nodes of the graph."""
    found: set[int] = set()
    for node in Walk([root], _SEARCH, breadth=True):
        if len(found) >= len(wanted):
            break
        if id(node) in wanted:
            found.add(id(node))
    return found


def loss_like(t: Any) -> bool:
    """A floating-point scalar with an autograd graph: what a loss looks like."""
    return (
        isinstance(t, Tensor) and t.grad_fn is not None and t.numel() == 1 and t.is_floating_point()
    )


def returned_loss(output: Any) -> Tensor | None:
    """The loss a model's forward returned (``signals.tree.output_loss``) that has a graph."""
    return output_loss(output, loss_like)
