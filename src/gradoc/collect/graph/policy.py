"""A categorical policy's entropy, read from the loss's autograd graph at ``backward()``.

A policy-gradient loss weighs the log-probabilities of the actions taken:
``Categorical(...).log_prob(a)`` gathers them from the whole distribution's
log-probabilities (``log(probs)`` for ``Categorical(probs=...)``, ``logits - logsumexp`` for
``Categorical(logits=...)``, or a ``log_softmax``), and the gather saves that distribution
for its backward. So the policy's entropy, ``-sum(p log p)`` over the actions, is at hand
with no change to the program: it is computed on the device from the saved
log-probabilities, as a share of its maximum ``ln(k)`` for ``k`` actions (1: uniform, 0:
one action certain), and read with the step's other statistics (no extra host read).

When: the first ``FIRST`` backward() calls, then one in ``EVERY``; a run whose first
``LOOKS`` looks found no policy is looked at no more (a supervised loss has none). At most
``walk.NODES`` nodes are walked and ``MOST`` distributions read (an episode's losses stacked:
their mean). An index of a ``log_softmax`` at the action (``F.log_softmax(logits, -1)[a]``)
is read from the result the ``log_softmax`` saved. A gather over log-probabilities is also how a
cross-entropy is written by hand
(``-log_softmax(x).gather(1, y)``): its entropy is recorded too, and judged only for an
objective judged a policy (``detect.training``, ``findings.policy_collapse``).

Not read: a continuous policy (a Normal's log-density has no gather; its entropy is that of
its scale, unbounded below).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from .walk import Walk

FIRST = 20
EVERY = 10
LOOKS = 3
MOST = 16
LOG_PROBS = ("LogSoftmaxBackward0", "LogBackward0")
"""Nodes whose output, gathered, is a categorical distribution's log-probabilities
(``log_softmax``, ``Categorical(probs=...)``'s log); also ``logits - logsumexp(logits)``
(``Categorical(logits=...)``: a ``SubBackward0`` over a ``LogsumexpBackward0``)."""


def _log_probs(node: Any) -> bool:
    """``node`` makes a categorical distribution's log-probabilities."""
    name = node.name()
    if name in LOG_PROBS:
        return True
    return name == "SubBackward0" and any(
        fn is not None and fn.name() == "LogsumexpBackward0" for fn, _ in node.next_functions
    )


def distributions(root: Any) -> list[tuple[Tensor, int]]:
    """The log-probabilities gathered in ``root``'s graph (each with the dimension of its
    actions): at most ``MOST``, within ``walk.NODES`` nodes, not below a gather."""
    found: list[tuple[Tensor, int]] = []
    walk = Walk([root])
    for node in walk:
        if len(found) >= MOST:
            break
        if node.name() in ("IndexBackward0", "SelectBackward0"):  # log_softmax(x)[a]
            below = node.next_functions[0][0] if node.next_functions else None
            if below is not None and below.name() == "LogSoftmaxBackward0":
                saved = _saved_log_softmax(below)
                if saved is not None:
                    found.append(saved)
                walk.prune()
                continue
        if node.name() == "GatherBackward0":
            walk.prune()
            below = node.next_functions[0][0] if node.next_functions else None
            if below is not None and _log_probs(below):
                try:
                    saved, dim = node._saved_self, int(node._saved_dim)
                except RuntimeError:  # freed by a backward already run
                    continue
                dim = dim - (1 << 64) if dim >= 1 << 63 else dim  # -1 is saved as unsigned
                whole = isinstance(saved, Tensor) and -saved.dim() <= dim < saved.dim()
                if whole and saved.shape[dim] > 1:
                    found.append((saved, dim))
    return found


def _saved_log_softmax(node: Any) -> tuple[Tensor, int] | None:
    """The whole distribution a ``log_softmax`` node saved (its result) and its dimension."""
    try:
        saved, dim = node._saved_result, int(node._saved_dim)
    except (RuntimeError, AttributeError, TypeError):
        return None
    dim = dim - (1 << 64) if dim >= 1 << 63 else dim
    if isinstance(saved, Tensor) and -saved.dim() <= dim < saved.dim() and saved.shape[dim] > 1:
        return saved, dim
    return None


@torch.no_grad()
def entropy(root: Any) -> tuple[Tensor, int] | None:
    """The mean entropy of the distributions gathered in ``root``'s graph, as a share of its
    maximum (a float tensor on their device), and the number of actions of the first; None
    when there is none."""
    found = distributions(root)
    if not found:
        return None
    shares = [
        torch.special.entr(lp.detach().float().exp()).sum(dim).mean() / math.log(lp.shape[dim])
        for lp, dim in found
    ]
    lp, dim = found[0]
    return torch.stack(shares).mean(), int(lp.shape[dim])


class PolicyReader:
    """When a ``backward()``'s graph is looked at for a policy (see the module docstring)."""

    __slots__ = ("actions", "looked", "reads")

    def __init__(self) -> None:
        self.reads = 0
        self.looked = 0
        self.actions: int | None = None
        """The first policy's number of actions, once one was found."""

    def read(self, root: Any) -> Tensor | None:
        """This ``backward()``'s policy entropy (a share of its maximum, on the device), on
        the reads sampled; None elsewhere."""
        k, self.reads = self.reads, self.reads + 1
        if (k >= FIRST and k % EVERY) or (self.actions is None and self.looked >= LOOKS):
            return None
        self.looked += 1
        try:
            got = entropy(root)
        except (RuntimeError, TypeError, ValueError, IndexError):  # a graph of another shape
            self.looked, self.actions = LOOKS, None  # not worth another look
            return None
        if got is None:
            return None
        share, actions = got
        if self.actions is None:
            self.actions = actions
        return share
