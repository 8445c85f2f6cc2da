"""Steps of a program that trains without ``torch.optim``.

The from-scratch loops of textbooks (``with torch.no_grad(): w -= lr * w.grad``), research
code that calls ``torch.autograd.grad`` and moves tensors itself, input optimisation: no
optimizer step to count. When no ``torch.optim`` optimizer exists, a step is one direct
``backward()`` or ``torch.autograd.grad`` call; its statistics are read when that call
returns, and the step ends at the next call (or at the end of the program), when the
tensors' change since is the step's update. The tensors that receive gradients are the
step's parameters: those the call names (``inputs``), else the leaves of the loss's
autograd graph; they are named after the module owning them, else after the variable of
the user's code that holds them, else by order and shape.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import Any

from torch import Tensor

from ..locate.origin import _user


class HandWritten:
    """Stands in for the optimizer of a program that updates its tensors itself: what a
    watched run reads of an optimizer (``param_groups``), with no learning rate."""

    def __init__(self) -> None:
        self.param_groups: list[dict[str, Any]] = [{"params": []}]

    def __repr__(self) -> str:
        return "<hand-written updates>"


def _as_list(tensors: Any) -> list[Tensor]:
    if isinstance(tensors, Tensor):
        return [tensors]
    if isinstance(tensors, (list, tuple)):
        return [t for t in tensors if isinstance(t, Tensor)]
    return []


def step_leaves(outputs: Any, inputs: Any) -> list[Tensor]:
    """The tensors a ``backward(outputs, inputs=...)`` or ``autograd.grad(outputs, inputs)``
    gives gradients to: ``inputs`` when named, else the leaves of the graph (its
    ``AccumulateGrad`` nodes), in the order a walk from the outputs meets them."""
    named = _as_list(inputs)
    if named:
        return named
    leaves: list[Tensor] = []
    seen: set[int] = set()
    todo: list[Any] = [t.grad_fn for t in reversed(_as_list(outputs)) if t.grad_fn is not None]
    for t in _as_list(outputs):  # a leaf handed to backward() itself
        if t.grad_fn is None and t.requires_grad:
            leaves.append(t)
    while todo:
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


def variable_names(tensors: Sequence[Tensor]) -> dict[int, str]:
    """The names the user's code holds ``tensors`` by (``w``, ``params[0]``,
    ``weights['fc']``), read from the innermost frame of the user's code and its module's
    globals; once per new tensor, never per step."""
    wanted = {id(t) for t in tensors}
    found: dict[int, str] = {}
    frame = sys._getframe(1)
    while frame is not None and not _user(frame.f_code.co_filename):
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return found
    for scope in (frame.f_locals, frame.f_globals):
        for name, value in list(scope.items()):
            if name.startswith("__"):
                continue
            for label, t in _held(name, value):
                if id(t) in wanted and id(t) not in found:
                    found[id(t)] = label
        if len(found) == len(wanted):
            break
    return found


def _held(name: str, value: Any) -> Iterable[tuple[str, Tensor]]:
    if isinstance(value, Tensor):
        yield name, value
    elif isinstance(value, (list, tuple)) and len(value) <= 1000:
        for i, v in enumerate(value):
            if isinstance(v, Tensor):
                yield f"{name}[{i}]", v
    elif isinstance(value, dict) and len(value) <= 1000:
        for k, v in value.items():
            if isinstance(v, Tensor) and isinstance(k, (str, int)):
                yield f"{name}[{k!r}]", v


def fallback_name(index: int, t: Tensor) -> str:
    """A tensor nobody named: by its order of first use and its shape (``tensor0[784x10]``)."""
    return f"tensor{index}[{'x'.join(map(str, t.shape))}]"
