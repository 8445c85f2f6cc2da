"""Activations applied as functions (``F.relu(self.fc(x))``): no module of their own.

A ReLU that is a function has no output gradoc can hook, so its dead units go unseen —
as a practitioner would, gradoc watches the output of the layer before instead: a unit
of ``fc`` that is never > 0 is a dead unit of the ``F.relu`` that follows it, and a
pre-activation beyond ±2.99 is a saturated ``torch.tanh``.

Which module feeds which function is read from the autograd graph, once, on the first
activation step: the activation hook remembers the autograd node of each watched
module's output; at that step's ``backward()`` the graph is walked from the loss (at
most ``graph.REACH`` nodes, host-side only) and each ``ReluBackward0`` / ``TanhBackward0``
/ ``SigmoidBackward0`` whose input is such a node — and that is not itself a watched
module's output (an ``nn.ReLU``) — marks that module.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from ...stats.activations import SaturationRule
from ..graph import REACH, Walk

_ACTIVATIONS = {"ReluBackward0": "relu", "TanhBackward0": "tanh", "SigmoidBackward0": "sigmoid"}

# pre-activation saturation: the function's derivative below 1% of its peak
PRE_ACTIVATION_SATURATION: dict[str, SaturationRule] = {
    "tanh": lambda x: x.abs() > 2.99,
    "sigmoid": lambda x: x.abs() > 5.99,
}


def functional_activations(loss: Tensor, produced: dict[Any, Any]) -> list[tuple[Any, str]]:
    """For each value of ``produced`` (autograd node of a watched module's output -> that
    module) whose output goes through an activation function: (module, function name)."""
    found: dict[int, tuple[Any, str]] = {}
    for node in Walk([loss.grad_fn], REACH):
        kind = _ACTIVATIONS.get(node.name())
        if kind is not None and node not in produced:  # a function, not an nn.ReLU's output
            for fn, _ in node.next_functions:
                if fn is not None and fn in produced:
                    found[id(produced[fn])] = (produced[fn], kind)
    return list(found.values())
