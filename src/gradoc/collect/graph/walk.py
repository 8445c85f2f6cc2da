"""The one walk of a loss's autograd graph: from its ``grad_fn`` down ``next_functions``.

Every reader of the graph (``mechanics``, ``policy``, ``attention``, ``output_logits``, the
leaves a loss reaches, the activation functions after a layer) iterates a :class:`Walk`
and looks at the nodes it meets; none walks the graph its own way. One rule for all:

- each node is met once, at most ``limit`` nodes: :data:`NODES` for a read made on a
  sampled step (its cost is paid again), :data:`REACH` for a walk made once a run that must
  see the whole graph (the parameters a loss reaches);
- depth first (a stack: the forward's last op first), or ``breadth`` first where the
  nearest nodes are what a reader wants (the loss's own log-softmax);
- a reader that took a node calls :meth:`Walk.prune`: the walk goes on beside that node,
  not below it (a gathered distribution's own inputs are not another distribution).

How near a match must lie (a softmax's product within a few nodes, the parameter that
names a layer) is the reader's own look, not a walk of the graph.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

from torch import Tensor

NODES = 4096
"""Autograd nodes a read of a loss's graph meets at most (a very large graph is read in
part): the budget of every read made on sampled steps."""
REACH = 20_000
"""Autograd nodes a walk made once a run meets at most: the leaves a loss reaches, the
activation functions after each layer."""


class Walk:
    """A walk of the graph below ``roots`` (autograd nodes; None is skipped)."""

    __slots__ = ("_breadth", "_limit", "_ordered", "_pruned", "_roots")

    def __init__(
        self,
        roots: list[Any],
        limit: int | None = NODES,
        *,
        breadth: bool = False,
        ordered: bool = False,
    ) -> None:
        """``ordered``: depth first with each node's inputs in their order (the first
        argument's subgraph first), as a recursion would meet them."""
        self._roots, self._limit, self._breadth, self._ordered = roots, limit, breadth, ordered
        self._pruned = False

    def __iter__(self) -> Iterator[Any]:
        limit, breadth, ordered = self._limit, self._breadth, self._ordered
        seen: set[int] = set()  # the ids of the nodes met
        todo: deque[Any] = deque(reversed(self._roots) if ordered else self._roots)
        while todo and (limit is None or len(seen) < limit):
            node = todo.popleft() if breadth else todo.pop()
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            self._pruned = False
            yield node
            if not self._pruned:
                below = node.next_functions
                todo.extend(fn for fn, _ in (reversed(below) if ordered else below))

    def prune(self) -> None:
        """Not below the node just met (the reader took it)."""
        self._pruned = True


def graph_leaves(roots: list[Any], limit: int | None = None) -> list[Tensor]:
    """The leaf tensors (``AccumulateGrad`` nodes' variables) below autograd nodes ``roots``,
    in the order a walk from them meets them; at most ``limit`` nodes are walked."""
    leaves: list[Tensor] = []
    walk = Walk(roots, limit, ordered=True)
    for node in walk:
        variable = getattr(node, "variable", None)
        if isinstance(variable, Tensor):
            leaves.append(variable)
            walk.prune()
    return leaves
