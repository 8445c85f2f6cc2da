"""Attention's sharpness, read from the loss's autograd graph at ``backward()``.

Attention logits that grow until the softmax is one-hot precede the instability of large
transformers (Dehghani et al. 2023, ViT-22B; Wortsman et al. 2023, small-scale proxies, who
show it in small models at high learning rates, removed by qk-layernorm). The graph holds
what it takes to see it, with no change to the program and no hook on the forward:

- an explicit ``softmax(q @ k^T)`` (minGPT, nanoGPT's slow path, ``nn.MultiheadAttention``
  asked for its weights): ``SoftmaxBackward0`` saves the probabilities it computed, over a
  ``BmmBackward0`` (a product of two activations; a layer's product with its weight is an
  ``mm``). ``log p`` is the logits less their row's log-sum-exp, so the gap between a row's
  largest and smallest logit is ``max log p - min log p`` exactly (while ``p`` > 0 in its
  dtype: about 87 nats in float32, where a row is one-hot for any purpose);
- ``scaled_dot_product_attention`` (and ``nn.MultiheadAttention`` without weights, and
  ``nn.TransformerEncoderLayer`` in training): its node saves the query, the key, the scale
  and the mask, and the logits are recomputed for the first sample of the batch.

Per attention call and head, on the device: the largest logit gap over the rows (how far
from uniform the softmax can be pushed) and the mean entropy of the rows as a share of its
maximum ``ln(keys)`` (1: uniform, 0: one key). Read on the first ``FIRST`` backward calls,
then one in ``EVERY`` (or fewer, chosen once to keep within the budget); a run whose first ``LOOKS``
looks found no attention is looked at no more. At most ``walk.NODES`` nodes are walked, ``MOST``
calls read, each on at most ``ROWS`` query rows of one sample. Each call is named by the
layer that holds it: the module of the first parameter below the attention's inputs (a
``q_proj`` Linear's parent, a ``MultiheadAttention``'s own ``in_proj_weight``).
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ...store.writer import real
from ..probe import ROUND
from .output_logits import logits_dtype, output_calls, output_stats, saved
from .walk import Walk

FIRST = 20
EVERY = 10
LOOKS = 3
MOST = 64
ROWS = 256
"""Query rows of one sample read per call (a long sequence's last rows are left out)."""
BELOW = 8
"""Nodes looked through between a softmax and the product of its logits (a scale, a mask,
a bias, a view)."""
OWNER = 64
"""Nodes looked through below an attention's inputs for the parameter that names its layer."""
BUDGET_SHARE = 0.03
BUDGET_FLOOR_S = 1e-4
"""A read's cost, spread over the steps until the next, stays within the larger of 3% of
those steps and 0.1 ms a step (``DESIGN.md``'s budget), judged on the median early read."""

_PRODUCT = frozenset({"BmmBackward0"})
_THROUGH = frozenset(
    {
        "MulBackward0",
        "DivBackward0",
        "AddBackward0",
        "MaskedFillBackward0",
        "WhereBackward0",
        "ViewBackward0",
        "UnsafeViewBackward0",
        "ReshapeAliasBackward0",
        "CloneBackward0",
        "ToCopyBackward0",
        "ExpandBackward0",
    }
)


def _logits_product(node: Any) -> bool:
    """A softmax's input is a product of two activations within :data:`BELOW` nodes."""
    todo, steps = [node], 0
    while todo and steps < BELOW:
        n = todo.pop()
        steps += 1
        if n is None:
            continue
        name = n.name()
        if name in _PRODUCT:
            return True
        if name in _THROUGH:
            todo.extend(fn for fn, _ in n.next_functions)
    return False


def attention_calls(root: Any) -> list[tuple[Any, str]]:
    """The attention nodes in ``root``'s graph, in the order the forward made them:
    ("softmax" | "sdpa") with the node."""
    found: list[tuple[int, Any, str]] = []
    for node in Walk([root]):
        if len(found) >= MOST:
            break
        name = node.name()
        if name in ("SoftmaxBackward0", "SafeSoftmaxBackward0"):
            below = node.next_functions[0][0] if node.next_functions else None
            if below is not None and _logits_product(below):
                found.append((node._sequence_nr(), node, "softmax"))
        elif name.startswith("ScaledDotProduct") and hasattr(node, "_saved_query"):
            found.append((node._sequence_nr(), node, "sdpa"))
    found.sort(key=lambda f: f[0])
    return [(node, kind) for _, node, kind in found]


def owner(node: Any, names: dict[int, str]) -> str | None:
    """The name of the first parameter below ``node`` (``names``: by the parameter's id)."""
    for n in Walk([node], OWNER, breadth=True):
        variable = getattr(n, "variable", None)
        if variable is not None and id(variable) in names:
            return names[id(variable)]
    return None


def layer_of(param: str) -> str:
    """The layer a parameter names: a ``weight`` or ``bias`` belongs to a leaf layer (a
    projection, a norm), whose parent is the attention; any other (``in_proj_weight``)
    to the attention module itself."""
    module, _, local = param.rpartition(".")
    if local in ("weight", "bias") and "." in module:
        return module.rpartition(".")[0]
    return module or param


def output_layer(product: Any, names: dict[int, str], i: int) -> str:
    """An output layer's name: the module of the weight its product (``addmm``/``mm``) was
    made with (``lm_head``; ``transformer.wte`` where the embedding is tied)."""
    weight = product.next_functions[-1][0] if product.next_functions else None
    name = owner(weight, names) if weight is not None else None
    return (name.rpartition(".")[0] or name) if name else f"{UNNAMED_OUTPUT}{i}"


def _row_stats(logp: Tensor, allowed: Tensor) -> Tensor:
    """Per head (dim 0): the largest gap between a row's largest and smallest allowed logit,
    and the rows' mean entropy as a share of ``ln(allowed keys)`` (rows of one key left out);
    ``logp``: log-probabilities (rows on the last dim), ``allowed``: the keys not masked."""
    big = torch.finfo(logp.dtype).max
    hi = logp.masked_fill(~allowed, -big).amax(-1)
    lo = logp.masked_fill(~allowed, big).amin(-1)
    keys = allowed.sum(-1)
    rows = keys > 1
    p = logp.exp().masked_fill(~allowed, 0.0)
    ent = torch.special.entr(p).sum(-1) / keys.clamp_min(2).to(logp.dtype).log()
    gap = torch.where(rows, hi - lo, torch.zeros_like(hi)).flatten(1).amax(-1)
    share = (ent * rows).flatten(1).sum(-1) / rows.flatten(1).sum(-1).clamp_min(1)
    return torch.stack([gap, share])


def _heads(t: Tensor) -> Tensor:
    """The first sample's heads, (heads, rows, keys) or (heads, rows, dim): a 4-d tensor's
    first sample, a 3-d one's first 16 (batch and heads folded together)."""
    return t[0] if t.dim() == 4 else t[:16] if t.dim() == 3 else t.reshape(1, *t.shape[-2:])


@torch.no_grad()
def softmax_stats(node: Any) -> Tensor | None:
    p = saved(node, "_saved_result")
    if not isinstance(p, Tensor) or p.dim() < 3 or not p.is_floating_point():
        return None
    p = _heads(p)[:, -ROWS:].float()
    allowed = p > 0
    return _row_stats(torch.log(p.clamp_min(torch.finfo(p.dtype).tiny)), allowed)


@torch.no_grad()
def sdpa_stats(node: Any) -> Tensor | None:
    q, k = saved(node, "_saved_query"), saved(node, "_saved_key")
    if not isinstance(q, Tensor) or not isinstance(k, Tensor) or q.dim() < 3:
        return None
    scale = saved(node, "_saved_scale")
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    q0, k0 = _heads(q).float(), _heads(k).float()
    if k0.shape[0] != q0.shape[0] and q0.shape[0] % k0.shape[0] == 0:  # grouped queries
        k0 = k0.repeat_interleave(q0.shape[0] // k0.shape[0], 0)
    t, s = q0.shape[-2], k0.shape[-2]
    rows = slice(max(0, t - ROWS), t)
    logits = (q0[:, rows] @ k0.transpose(-1, -2)) * scale
    allowed = torch.ones(logits.shape, dtype=torch.bool, device=logits.device)
    if bool(saved(node, "_saved_is_causal")):
        allowed &= torch.ones(t, s, dtype=torch.bool, device=logits.device).tril()[rows]
    mask = saved(node, "_saved_attn_mask")
    if mask is None:  # the memory-efficient kernel saves its mask as a bias
        mask = saved(node, "_saved_attn_bias")
    if isinstance(mask, Tensor):
        full = torch.broadcast_to(mask, (*q.shape[:-2], t, s)) if q.dim() >= 3 else mask
        m = _heads(full)[:, rows] if full.dim() >= 3 else full[rows]
        if m.dtype == torch.bool:
            allowed &= m
        else:
            logits = logits + m.float()
            allowed &= torch.isfinite(m) & (m > torch.finfo(torch.float32).min / 2)
    logits = logits.masked_fill(~allowed, -math.inf)
    return _row_stats(torch.log_softmax(logits, -1), allowed)


class AttentionReader:
    """When a ``backward()``'s graph is looked at for attention (see the module docstring)
    and for the output logits under the loss's log-softmax (``collect.graph.output_logits``).

    The first :data:`FIRST` reads are every step's, and timed; from there one in ``every``,
    chosen once from their medians as ``collect.step.cadence`` chooses its k: the smallest of its
    round numbers (at least :data:`EVERY`) at which a read's cost, spread over the steps until
    the next, stays within the larger of :data:`BUDGET_SHARE` of a step and
    :data:`BUDGET_FLOOR_S`. One slow read (a preempted process) changes nothing, and which
    steps are read never depends on later timing."""

    __slots__ = (
        "_last",
        "_last_step",
        "_timed",
        "dtypes",
        "every",
        "layers",
        "looked",
        "output",
        "outputs",
        "reads",
    )

    def __init__(self) -> None:
        self.reads = 0
        self.looked = 0
        self.every = EVERY
        self.layers: list[str] | None = None
        """The attention calls' layers, in forward order, once some were found."""
        self.outputs: list[str] | None = None
        """The output layers whose logits the loss's log-softmaxes read, nearest it first."""
        self.dtypes: list[str] = []
        """The dtype each output layer computed its logits in."""
        self.output: list[Tensor] | None = None
        """The last read's output statistics, (3,) each on the device (``output_logits``)."""
        self._last_step = -1
        self._last: tuple[int, float] | None = None  # the last read: its count and start
        self._timed: list[tuple[float, float]] = []  # early reads: (cost, step time), seconds

    @property
    def said(self) -> str:
        """When the calls are read, in words (``meta['attention']['read']``)."""
        return f"the first {FIRST} backward() calls, then 1 in {self.every}"

    def due(self, step: int) -> bool:
        """Whether this ``backward()`` is read (one per step, on the sampled ones); counts it.
        A run whose first looks found neither attention nor output logits is never read
        again."""
        found = self.layers is not None or self.outputs is not None
        if step == self._last_step or (not found and self.looked >= LOOKS):
            return False
        k, self.reads = self.reads, self.reads + 1
        if k >= FIRST and k % self.every:
            return False
        self._last_step = step
        return True

    def read(self, root: Any, names: dict[int, str]) -> list[Tensor] | None:
        """Per attention call of a ``backward()`` that is :meth:`due`, its (2, heads)
        statistics on the device (None: none found). ``names``: parameter names by id, to
        name the layers."""
        self.looked += 1
        began = time.perf_counter()
        try:
            return self._read(root, names)
        finally:
            self._time(self.reads - 1, began, time.perf_counter() - began)

    def _time(self, k: int, began: float, cost: float) -> None:
        """Time the early reads; after the last of them, choose ``every`` (fixed from then)."""
        if k >= FIRST:
            return
        last, self._last = self._last, (k, began)
        if last is not None and k > last[0]:
            self._timed.append((cost, (began - last[1]) / (k - last[0])))
        if k == FIRST - 1 and self._timed:
            cost_s = statistics.median(c for c, _ in self._timed)
            step_s = statistics.median(s for _, s in self._timed)
            allowed = max(BUDGET_SHARE * step_s, BUDGET_FLOOR_S)
            fits = [n for n in ROUND if n >= EVERY and cost_s / n <= allowed]
            self.every = fits[0] if fits else ROUND[-1]

    def _read(self, root: Any, names: dict[int, str]) -> list[Tensor] | None:
        """Each kind is looked for on the first :data:`LOOKS` reads, then only where found."""
        early = self.looked <= LOOKS
        self.output = self._read_outputs(root, names) if early or self.outputs else None
        if not (early or self.layers):
            return None
        try:
            calls = attention_calls(root)
            stats = [
                softmax_stats(node) if kind == "softmax" else sdpa_stats(node)
                for node, kind in calls
            ]
        except (RuntimeError, TypeError, ValueError, IndexError):  # a graph of another shape
            self.layers = None
            if self.outputs is None:
                self.looked = LOOKS
            return None
        kept = [(node, s) for (node, _), s in zip(calls, stats) if s is not None]
        if not kept:
            return None
        if self.layers is None or len(kept) != len(self.layers) or UNNAMED in self.layers[0]:
            self.layers = [
                layer_of(name) if (name := owner(node, names)) else f"{UNNAMED}{i}"
                for i, (node, _) in enumerate(kept)
            ]
        return [s for _, s in kept]

    def _read_outputs(self, root: Any, names: dict[int, str]) -> list[Tensor] | None:
        """The output logits' level (``collect.graph.output_logits``), where the loss shows one."""
        try:
            calls = output_calls(root)
            kept = [(p, s) for ls, p in calls if (s := output_stats(ls, p)) is not None]
        except (RuntimeError, TypeError, ValueError, IndexError):  # a graph of another shape
            return None
        if not kept:
            return None
        named = self.outputs and UNNAMED_OUTPUT not in self.outputs[0]
        if not named or len(kept) != len(self.outputs or ()):
            self.outputs = [output_layer(p, names, i) for i, (p, _) in enumerate(kept)]
            self.dtypes = [logits_dtype(p) for p, _ in kept]
        return [s for _, s in kept]


UNNAMED = "attention."
"""A call named before the run knew its parameters (the first backward() of ``gradoc run``
comes before its optimizer's step): ``attention.0``, named again at the next read."""
UNNAMED_OUTPUT = "output."
"""An output layer named before the run knew its parameters: ``output.0``."""


def attention_row(step: int, site: int, values: Any) -> tuple[Any, ...]:
    """The ``attention`` row of one call (``values``: its host values, the heads' logit gaps
    then their entropy shares)."""
    pairs = np.asarray(values, dtype="=f4").reshape(2, -1)
    gap, share = pairs[0], pairs[1]
    blob = np.ascontiguousarray(pairs.T).tobytes()
    return (step, site, real(float(gap.max())), real(float(share.mean())), blob)
