"""Padding and masking audit: do padded positions change what the model computes for the
real ones, and does the loss count them?

``padding_leak``: the batch is run twice, identical but for the padded positions (other
token ids, or noise on padded embeddings); dropout repeats (the RNG is restored) and
buffers are put back. Every module's output is compared at the *real* positions (or per
sample, for pooled outputs and RNN states); the first module, in the order modules finish,
whose real outputs change is where the leak appears — a self-attention without a key
padding mask, a mean pool over padded positions, a BatchNorm over the sequence axis, an RNN
run over the pads. A leak counts when the model's final output changes.

``loss_includes_padding``: the gradient of the loss with respect to the model's output at
padded positions must be exactly zero (``ignore_index`` or a loss mask do that); anything
else means the pads are in the loss. This needs per-position outputs and targets.

Also measured: the padding ratio of the batch and the compute it wastes (linear layers:
the padding ratio; attention: ``1 - sum(len_i^2) / (B * T^2)``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from .._util import entry, objects
from .._util.objects import IdMap
from .._util.state import kept
from .._util.tree import output_loss
from .._util.tree import tensors as _tensors
from ..detect.finding import Evidence, Finding

MASK_KWARGS = (
    "attention_mask",
    "src_key_padding_mask",
    "key_padding_mask",
    "padding_mask",
    "pad_mask",
    "mask",
)
"""Model keyword arguments taken to describe padding (``gradoc run --check padding``)."""
TOLERANCE = 1e-4


def mask_pads(kwargs: dict[str, Any]) -> tuple[Tensor, str] | None:
    """Where the pads are according to a padding-mask keyword argument, (B, T) bool (True =
    pad), and which argument said so; ``attention_mask`` marks real tokens with 1."""
    if not kwargs:  # the common call, model(x): every forward asks
        return None
    for key in MASK_KWARGS:
        m = kwargs.get(key)
        if isinstance(m, Tensor) and m.dim() == 2:
            return (m == 0 if key == "attention_mask" else m.bool()), key
    return None


def pads_from(
    batch: Tensor,
    pad_mask: Tensor | None = None,
    attention_mask: Tensor | None = None,
    pad_id: int | None = None,
) -> Tensor:
    """Where the pads are, as a (B, T) bool tensor (True = pad)."""
    if pad_mask is not None:
        return pad_mask.bool()
    if attention_mask is not None:
        return attention_mask == 0
    if pad_id is not None:
        return batch == pad_id
    raise ValueError("say where the padding is: pad_mask=, attention_mask= or pad_id=")


def _real(t: Tensor, pads: Tensor) -> Tensor | None:
    """``t`` at the real positions (per-position layouts) or per sample (pooled, states)."""
    b, n = pads.shape
    s = t.shape
    if t.dim() >= 2 and s[0] == b and s[1] == n:
        return t[~pads]
    if t.dim() >= 2 and s[0] == n and s[1] == b:
        return t.transpose(0, 1)[~pads]
    if t.dim() >= 3 and s[0] == b and s[-1] == n:  # channels first: (B, C, T)
        return t.movedim(-1, 1)[~pads]
    if t.dim() >= 1 and s[0] == b:
        return t
    if t.dim() >= 2 and s[1] == b:
        return t.transpose(0, 1)
    return None


def _perturb(x: Tensor, pads: Tensor, pad_id: int | None) -> Tensor:
    g = torch.Generator(device="cpu").manual_seed(1234)
    if not x.is_floating_point():
        high = int(x.max()) + 1
        shift = torch.randint(1, max(2, high), x.shape, generator=g).to(x.device)
        other = (x + shift) % max(2, high)
        if pad_id is not None:
            other = torch.where(other == pad_id, (other + 1) % max(2, high), other)
        return torch.where(pads.reshape(pads.shape + (1,) * (x.dim() - 2)), other, x)
    noise = torch.randn(x.shape, generator=g).to(x.device, x.dtype) * (x.abs().mean() + 1.0)
    mask = pads.reshape(pads.shape + (1,) * (x.dim() - 2))
    return torch.where(mask, x + noise, x)


def _run(
    model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], names: Mapping[nn.Module, str]
) -> tuple[Any, list[tuple[str, list[Tensor]]], dict[str, list[Tensor]]]:
    """The model's output, every module's outputs in the order they finished, their inputs."""
    outputs: list[tuple[str, list[Tensor]]] = []
    inputs: dict[str, list[Tensor]] = {}

    def hook(m: nn.Module, a: Any, out: Any) -> None:
        if m in names:
            outputs.append((names[m], [t.detach().clone() for t in _tensors(out)]))
            inputs[names[m]] = [t.detach().clone() for t in _tensors(a)]

    handle = entry.every_forward_hook(hook)
    try:
        with kept([model]), torch.no_grad():  # the user's RNG and buffers, put back
            torch.manual_seed(0)  # every variant draws the same dropout masks
            out = model(*args, **kwargs)
    finally:
        handle.remove()
    return out, outputs, inputs


def _changed(a: list[Tensor], b: list[Tensor], pads: Tensor) -> float:
    """The largest relative change at real positions between two outputs of a module."""
    worst = 0.0
    for x, y in zip(a, b):
        if x.shape != y.shape or not x.is_floating_point():
            continue
        rx, ry = _real(x, pads), _real(y, pads)
        if rx is None or ry is None or rx.numel() == 0:
            continue
        scale = float(rx.abs().max()) or 1.0
        worst = max(worst, float((rx - ry).abs().max()) / scale)
    return worst


def audit_padding(
    model: nn.Module,
    batch: Tensor | tuple[Any, ...] | None,
    *,
    pad_mask: Tensor | None = None,
    attention_mask: Tensor | None = None,
    pad_id: int | None = None,
    loss_fn: Callable[[Any, Any], Tensor] | None = None,
    targets: Tensor | None = None,
    model_kwargs: dict[str, Any] | None = None,
    batch_key: str | None = None,
    tolerance: float = TOLERANCE,
) -> list[Finding]:
    """Audit one padded batch; returns findings (``padding_leak``, ``loss_includes_padding``,
    ``padding_waste``).

    ``batch``: the model's first positional input (token ids (B, T) or embeddings (B, T,
    D)), or a tuple of positional inputs whose first is that; or, with ``batch_key``, the
    positional inputs (or None) while the batch is the keyword argument of that name
    (``batch_key="input_ids"`` for a Hugging Face model). Where the pads are: ``pad_mask``
    (True = pad), ``attention_mask`` (1 = real, 0 = pad; also passed to the model as
    ``attention_mask=``) or ``pad_id``. ``model_kwargs`` go to the model as they are (e.g.
    ``src_key_padding_mask=``, ``labels=``). ``loss_fn(output, targets)`` with
    per-position ``targets`` enables the loss check; a model that computes its loss itself
    (its output holds one: a Hugging Face ``ModelOutput.loss`` from ``labels=``, or a
    scalar beside per-position outputs) gets it too. The model runs in its current mode,
    without gradients for the leak check; its buffers and the RNG are restored.

    >>> import torch.nn as nn
    >>> model = nn.Sequential(nn.Embedding(10, 4, padding_idx=0), nn.Linear(4, 2))
    >>> ids = torch.tensor([[3, 4, 0, 0], [5, 6, 7, 0]])
    >>> ", ".join(f.kind for f in audit_padding(model, ids, pad_id=0))
    'padding_waste'
    """
    kwargs = dict(model_kwargs or {})
    args = () if batch is None else (batch if isinstance(batch, tuple) else (batch,))
    x = kwargs[batch_key] if batch_key is not None else args[0]
    pads = pads_from(x, pad_mask, attention_mask, pad_id).to(x.device)
    if attention_mask is not None:
        kwargs.setdefault("attention_mask", attention_mask)
    names = IdMap((m, n) for n, m in objects.named_modules(model))
    other = _perturb(x, pads, pad_id)
    if batch_key is not None:
        args2, kwargs2 = args, {**kwargs, batch_key: other}
    else:
        args2, kwargs2 = (other, *args[1:]), kwargs
    base, outs, ins = _run(model, args, kwargs, names)
    perturbed, outs2, ins2 = _run(model, args2, kwargs2, names)
    findings = []
    final = _changed(_tensors(base), _tensors(perturbed), pads)
    if final > tolerance:
        first = next(
            (
                (n, _changed(a, b, pads))
                for (n, a), (_, b) in zip(outs, outs2)
                if _changed(a, b, pads) > tolerance
            ),
            ("", final),
        )
        if first[0] and _changed(ins[first[0]], ins2[first[0]], pads) > tolerance:
            # its inputs had changed already: the leak is in the parent's own code
            first = (first[0].rpartition(".")[0], first[1])
        findings.append(
            Finding(
                kind="padding_leak",
                severity="error",
                step=None,
                layer=first[0],
                summary=f"padding leaks into the real positions from {first[0] or '(model)'}: "
                f"changing only the padded positions changes the model's output by "
                f"{final:.2g} (relative)",
                evidence=[
                    Evidence("first module whose real outputs change", first[0]),
                    Evidence("its relative change", first[1]),
                    Evidence("relative change of the model's output", final),
                ],
            )
        )
    if loss_fn is not None and targets is not None:
        findings += _loss_check(model, args, kwargs, loss_fn, targets, pads)
    elif output_loss(base) is not None:
        findings += _own_loss_check(model, args, kwargs, pads)
    findings += _waste(pads)
    return findings


def _own_loss_check(
    model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], pads: Tensor
) -> list[Finding]:
    """The loss check of a model that computes its loss itself: the gradient of that loss
    with respect to its per-position outputs (the logits), at the padded positions."""
    with kept([model]), torch.enable_grad():
        torch.manual_seed(0)
        out = model(*args, **kwargs)
        loss = output_loss(out)
        per_position = [
            t
            for t in _tensors(out)
            if t.dim() >= 2 and t.shape[:2] == pads.shape and t.requires_grad
        ]
        if loss is None or not loss.requires_grad or not per_position:
            return []
        (grad,) = torch.autograd.grad(loss, per_position[0], allow_unused=True)
    if grad is None:
        return []
    return _leaked(grad, pads, own=True)


def _loss_check(
    model: nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    loss_fn: Callable[[Any, Any], Tensor],
    targets: Tensor,
    pads: Tensor,
) -> list[Finding]:
    with kept([model]), torch.no_grad():
        out = model(*args, **kwargs)
    first = _tensors(out)[0].detach().clone().requires_grad_(True)
    loss_fn(first, targets).backward()
    grad = first.grad
    if grad is None:
        return []
    return _leaked(grad, pads)


def _leaked(grad: Tensor, pads: Tensor, own: bool = False) -> list[Finding]:
    """``loss_includes_padding`` when the loss's gradient at padded positions is not 0
    (``own``: the loss the model computed itself, from ``labels=``)."""
    at_pads = _real(grad, ~pads)  # the padded positions
    if at_pads is None or grad.shape[:2] != pads.shape:
        return []
    leaked = float(at_pads.abs().sum())
    if leaked == 0:
        return []
    share = leaked / (float(grad.abs().sum()) or 1.0)
    return [
        Finding(
            kind="loss_includes_padding",
            severity="error",
            step=None,
            layer=None,
            summary=f"the loss counts padded positions: {share:.0%} of its gradient goes to "
            "outputs at pads (use ignore_index or mask the loss)",
            evidence=[
                Evidence("share of the loss gradient at padded positions", share),
                Evidence("padded positions", int(pads.sum())),
            ],
            details={"model_loss": own},
        )
    ]


def waste(pads: Tensor) -> tuple[float, float]:
    """(padding ratio, attention compute wasted) of a (B, T) pad mask."""
    b, n = pads.shape
    lengths = (~pads).sum(1).double()
    ratio = float(pads.double().mean())
    attention = 1.0 - float((lengths**2).sum()) / (b * n * n) if n else 0.0
    return ratio, attention


def _waste(pads: Tensor) -> list[Finding]:
    ratio, attention = waste(pads)
    return [
        Finding(
            kind="padding_waste",
            severity="warning" if ratio > 0.5 else "info",
            step=None,
            layer=None,
            summary=f"{ratio:.0%} of the batch is padding ({attention:.0%} of attention compute "
            "wasted)"
            + ("; bucket by length (gradoc.data.LengthBucketSampler)" if ratio > 0.5 else ""),
            evidence=[
                Evidence("padding ratio", ratio),
                Evidence("attention compute wasted", attention),
            ],
        )
    ]
