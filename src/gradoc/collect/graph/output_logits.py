"""The output logits' level, read from the loss's autograd graph at ``backward()``.

A softmax cross-entropy cannot see the level of its logits: adding a constant to a row
changes no probability and no gradient, so nothing in the loss holds it. Under Adam (which
moves every coordinate by about the learning rate, however small its gradient) the rows of
rare classes, all pushed the same way, give the output weights a shared direction
(Stollenwerk et al. 2026); a hidden state that moves along it moves every logit at once,
and the log-partition ``log Z`` drifts from 0 (PaLM, Chowdhery et al. 2022, who added a
z-loss ``1e-4 * log(Z)^2`` to hold it; Wortsman et al. 2023, who show the divergence in
small models at high learning rates and without weight decay). In float32 a level of a few
hundred costs nothing; in bfloat16, whose spacing is up to ``|z| / 128``, the logits lose
the resolution the loss is measured in.

The graph holds what it takes, with no hook on the forward: ``cross_entropy`` (and
``log_softmax`` with ``nll_loss``) saves its log-probabilities on ``LogSoftmaxBackward0``,
over the output layer's ``addmm``/``mm`` (through views and a dtype cast), which saves the
layer's input and weight. ``log p = z - log Z`` for every class, so one class's logit
recomputed gives a row's ``log Z``: the largest class's (the most exact); the smallest
class's is recomputed too, and a row counts only where the two agree with ``log p``'s own
difference (a bias not found, rows that do not line up: the read is NaN). A temperature,
a slice or any other operation between the product and the log-softmax is not read.

Per output, on the device, over at most ``ROWS`` rows (fewer past ``CELLS`` values): the
mean ``log Z``, the mean largest logit, and the mean spread (largest less smallest logit,
which ``log p`` gives exactly).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .walk import Walk

ROWS = 256
CELLS = 1 << 20
"""Log-probabilities read at most per call: a 50,000-word vocabulary's first 20 rows."""
NEAR = 16
"""Nodes looked through from the loss for its log-softmax."""
BELOW = 8
"""Nodes looked through between a log-softmax and the output layer's product."""
AGREE = 0.9
"""Share of the rows whose two recomputed logits must agree with ``log p`` for a read."""

_SAME_ROWS = frozenset(
    {
        "ViewBackward0",
        "UnsafeViewBackward0",
        "ReshapeAliasBackward0",
        "ToCopyBackward0",
        "CloneBackward0",
        "TransposeBackward0",
    }
)
"""Nodes between a product and its log-softmax that keep its rows and values (a transpose
that only moved the classes' dimension, as ``cross_entropy`` over ``(batch, classes,
time)`` asks: rows that no longer line up fail the agreement check)."""
_INPUT = {"AddmmBackward0": "_saved_mat1", "MmBackward0": "_saved_self"}
_TO_PARAMETER = frozenset({"ToCopyBackward0", "ExpandBackward0", "ViewBackward0"})


def saved(node: Any, attr: str) -> Any:
    """A tensor or value a graph node saved for its backward; None once freed or absent."""
    try:
        return getattr(node, attr)
    except (AttributeError, RuntimeError):  # freed by a backward already run
        return None


def _product(node: Any) -> Any:
    """The ``addmm``/``mm`` a log-softmax's input comes from, through nodes that keep rows."""
    for _ in range(BELOW):
        if node is None:
            return None
        name = node.name()
        if name in _INPUT:
            return node
        if name not in _SAME_ROWS or not node.next_functions:
            return None
        node = node.next_functions[0][0]
    return None


def output_calls(root: Any) -> list[tuple[Any, Any]]:
    """The loss's log-softmaxes over a layer's product, nearest the loss first:
    (``LogSoftmaxBackward0``, its ``addmm``/``mm``)."""
    found: list[tuple[Any, Any]] = []
    walk = Walk([root], NEAR, breadth=True)
    for node in walk:
        if node.name() == "LogSoftmaxBackward0":
            below = node.next_functions[0][0] if node.next_functions else None
            product = _product(below)
            if product is not None:
                found.append((node, product))
            walk.prune()
    return found


def _parameter(node: Any) -> Tensor | None:
    """The parameter a product's bias input comes from, through casts and broadcasts."""
    for _ in range(4):
        if node is None:
            return None
        variable = getattr(node, "variable", None)
        if isinstance(variable, Tensor):
            return variable
        if node.name() not in _TO_PARAMETER or not node.next_functions:
            return None
        node = node.next_functions[0][0]
    return None


def _weight(product: Any) -> Tensor | None:
    """A linear layer's weight, transposed as its product used it (``x @ W^T``), from the
    parameter below the product's ``TBackward0``."""
    t = product.next_functions[-1][0] if product.next_functions else None
    if t is None or t.name() != "TBackward0":
        return None
    weight = _parameter(t.next_functions[0][0] if t.next_functions else None)
    return weight.detach().t() if weight is not None and weight.dim() == 2 else None


def _columns(w: Tensor, by_class: Tensor, at: Tensor) -> Tensor:
    """``w[:, at].t()``, gathered along the weight's contiguous dimension (a gather across
    it copies the whole weight first: 100 ms for a 50,000-word head on the CPU)."""
    if by_class.is_contiguous():
        return by_class.index_select(0, at)
    return w.index_select(1, at).t()


@torch.no_grad()
def output_stats(log_softmax: Any, product: Any) -> Tensor | None:
    """(log Z, largest logit, spread), means over the rows read, on the device; NaN where
    fewer than :data:`AGREE` of the rows could be recomputed. None: nothing to read."""
    logp = saved(log_softmax, "_saved_result")
    h, w = saved(product, _INPUT.get(product.name(), "")), saved(product, "_saved_mat2")
    if w is None:  # an input that needs no gradient: the product kept only the input
        w = _weight(product)
    if not all(isinstance(t, Tensor) for t in (logp, h, w)) or h.dim() != 2 or w.dim() != 2:
        return None
    dim = int(saved(log_softmax, "_saved_dim") or 0)
    dim = dim - (1 << 64) if dim >= 1 << 63 else dim  # -1 is saved as an unsigned 2**64 - 1
    logp = logp.movedim(dim, -1) if logp.dim() > 1 else logp
    if logp.shape[-1] != w.shape[1] or logp.numel() != h.shape[0] * w.shape[1]:
        return None
    rows = max(1, min(ROWS, CELLS // w.shape[1]))
    lp = logp.reshape(-1, w.shape[1])[:rows].float()
    x = h[: lp.shape[0]].float()
    big = torch.finfo(lp.dtype).max
    top, j = lp.max(-1)
    low, k = lp.nan_to_num(neginf=big).min(-1)
    by_class = w.t()  # a linear layer's own weight, (classes, features), contiguous
    z_j = (x * _columns(w, by_class, j).float()).sum(-1)
    z_k = (x * _columns(w, by_class, k).float()).sum(-1)
    if product.name() == "AddmmBackward0":
        bias = _parameter(product.next_functions[0][0])
        if bias is None:
            return None
        alpha = float(saved(product, "_saved_alpha") or 1.0)
        beta = float(saved(product, "_saved_beta") or 1.0)
        b = bias.detach().reshape(-1).float()
        if b.numel() != w.shape[1]:
            return None
        z_j, z_k = alpha * z_j + beta * b[j], alpha * z_k + beta * b[k]
    spread = top - low
    agree = ((z_j - z_k) - spread).abs() <= 0.05 + 0.01 * (z_j.abs() + z_k.abs())
    n = agree.sum().clamp_min(1)
    log_z = ((z_j - top) * agree).sum() / n
    stats = torch.stack([log_z, (z_j * agree).sum() / n, (spread * agree).sum() / n])
    ok = agree.float().mean() >= AGREE
    return torch.where(ok, stats, torch.full_like(stats, float("nan")))


def logits_dtype(product: Any) -> str:
    """The dtype the output layer's product computed its logits in (``bfloat16``, ...)."""
    h = saved(product, _INPUT.get(product.name(), ""))
    return str(h.dtype).removeprefix("torch.") if isinstance(h, Tensor) else "unknown"
