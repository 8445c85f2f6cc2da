"""Walks of a loss's autograd graph: from its ``grad_fn`` down ``next_functions``."""

from __future__ import annotations

from typing import Any

from torch import Tensor


def graph_leaves(roots: list[Any], limit: int | None = None) -> list[Tensor]:
    """The leaf tensors (``AccumulateGrad`` nodes' variables) below autograd nodes ``roots``,
    in the order a walk from them meets them; at most ``limit`` nodes are walked."""
    leaves: list[Tensor] = []
    seen: set[int] = set()
    todo: list[Any] = list(reversed(roots))
    while todo and (limit is None or len(seen) < limit):
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        variable = getattr(node, "variable", None)
        if isinstance(variable, Tensor):
            leaves.append(variable)
            continue
        todo.extend(fn for fn, _ in reversed(node.next_functions))
    return leaves
