"""Per-tensor reductions over lists of tensors (gradients, weights, updates)."""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

INF = float("inf")


def _dense(t: Tensor) -> Tensor:
    # NOTE: a sparse gradient (nn.Embedding(sparse=True)) holds its non-zeros in values();
    # coalescing first merges duplicate indices so norms match the dense tensor's.
    return t.coalesce().values() if t.is_sparse else t


GroupReduce = Callable[[torch.device, torch.dtype, list[Tensor]], Sequence[Tensor]]


def _per_tensor(
    tensors: Sequence[Tensor], device: torch.device | None, reduce: GroupReduce
) -> Tensor:
    """One scalar per tensor as a float64 vector in input order.

    ``reduce`` gets the tensors of one (device, dtype) group at a time, so foreach kernels,
    which need a single device and dtype, see whole groups.
    """
    if not tensors:
        return torch.zeros(0, dtype=torch.float64, device=device)
    kinds = {(t.device, t.dtype, t.layout) for t in tensors}  # attribute reads, no calls
    if len(kinds) == 1:
        # NOTE: the common case (one device, one dtype, dense) costs a fixed number of
        # Python calls whatever the tensor count: no per-tensor detach, grouping or cast.
        # Under no_grad, reducing tensors that require grad records no graph.
        ((dev, dtype, layout),) = kinds
        if layout is torch.strided:
            with torch.no_grad():
                out_dtype = torch.float32 if (device or dev).type == "mps" else torch.float64
                return torch.stack(list(reduce(dev, dtype, list(tensors)))).to(
                    device=device or dev, dtype=out_dtype
                )
    # gradients do not require grad: detaching them would only add a view op per tensor
    dense = [_dense(t.detach() if t.requires_grad else t) for t in tensors]
    device = device or dense[0].device
    groups: dict[tuple[torch.device, torch.dtype], list[int]] = defaultdict(list)
    for i, t in enumerate(dense):
        groups[(t.device, t.dtype)].append(i)
    parts: dict[int, Tensor] = {}
    for (dev, dtype), idx in groups.items():
        parts.update(zip(idx, reduce(dev, dtype, [dense[i] for i in idx])))
    values = [parts[i] for i in range(len(dense))]
    out_dtype = torch.float32 if device.type == "mps" else torch.float64
    if len(groups) == 1:  # the common case: one stack, one cast
        return torch.stack(values).to(device=device, dtype=out_dtype)
    return torch.stack([v.to(device=device, dtype=out_dtype) for v in values])


def _l2(dev: torch.device, dtype: torch.dtype, ts: list[Tensor]) -> Sequence[Tensor]:
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    return torch._foreach_norm(ts, 2, dtype=acc)


def _l2_wide(dev: torch.device, dtype: torch.dtype, ts: list[Tensor]) -> Sequence[Tensor]:
    # float64 squares: weights an update made huge (1e20) still get a finite norm
    wide = torch.float32 if dev.type == "mps" else torch.float64
    return torch._foreach_norm(ts, 2, dtype=wide)


def _max_abs(dev: torch.device, ts: list[Tensor], big: bool | None) -> Sequence[Tensor]:
    if dev.type != "cpu":
        return torch._foreach_norm(ts, INF)
    if not (large(ts) if big is None else big):
        # many small tensors: a fixed number of calls (the abs copies are small); an empty
        # tensor has no max, its max-abs is 0 (below)
        with contextlib.suppress(RuntimeError):
            return torch._foreach_max(torch._foreach_abs(ts))  # type: ignore[attr-defined,no-any-return]
    # NOTE: on CPU the foreach inf-norm is an unvectorised loop, ~15x slower than aminmax
    # on large tensors (measured on the overhead benchmark's model), and the foreach max
    # of abs copies ~5x; on accelerators the fused foreach kernel is the fast one. Few,
    # large tensors: a call per tensor is nothing beside the pass over its values.
    # aminmax refuses empty tensors, whose max-abs is 0.
    live = [t if t.numel() else t.new_zeros(1) for t in ts]
    lo, hi = zip(*(torch.aminmax(t) for t in live))
    return torch.maximum(torch.stack(hi), -torch.stack(lo)).unbind()


_LARGE = 16384
"""Mean elements per tensor above which a CPU max-abs takes one aminmax per tensor."""


def large(tensors: Sequence[Tensor]) -> bool:
    """Few, large tensors (on average over ``_LARGE`` elements): a Python call per tensor
    costs nothing beside a pass over its values. Cached per list of tensors' sizes is the
    caller's business (:class:`~gradoc.collect.grads.Target` asks once per parameter set)."""
    return sum([t.numel() for t in tensors]) >= _LARGE * max(1, len(tensors))


def _nonfinite(dev: torch.device, dtype: torch.dtype, ts: list[Tensor]) -> Sequence[Tensor]:
    return [(~torch.isfinite(t)).sum() for t in ts]


def norms(
    tensors: Sequence[Tensor], device: torch.device | None = None, wide: bool = False
) -> Tensor:
    """L2 norm of each tensor, accumulated in float32 (fp16 squares overflow), or in
    float64 with ``wide`` (values beyond ~1e19 square past float32's range), as one vector.

    >>> norms([torch.ones(4), torch.zeros(2)]).tolist()
    [2.0, 0.0]
    """
    return _per_tensor(tensors, device, _l2_wide if wide else _l2)


def max_abs(
    tensors: Sequence[Tensor], device: torch.device | None = None, big: bool | None = None
) -> Tensor:
    """Largest absolute value of each tensor (NaN if it holds a NaN), as one vector
    (``big``: whether the tensors are few and large, see :func:`large`, when known).

    >>> max_abs([torch.tensor([-3.0, 2.0])]).tolist()
    [3.0]
    """
    return _per_tensor(tensors, device, lambda dev, dtype, ts: _max_abs(dev, ts, big))


def nonfinite_counts(tensors: Sequence[Tensor], device: torch.device | None = None) -> Tensor:
    """Number of NaN/Inf values in each tensor, as one vector.

    The collector calls this only for gradients whose norm came back non-finite, so a
    healthy step never pays for the extra pass.

    >>> nonfinite_counts([torch.tensor([1.0, float("nan"), float("inf")])]).tolist()
    [2.0]
    """
    return _per_tensor(tensors, device, _nonfinite)


def update_stats(
    params: Sequence[Tensor], before: Sequence[Tensor], device: torch.device | None = None
) -> Tensor:
    """Per-parameter ``[weight L2 norms before the step..., update L2 norms...]`` (update =
    after - before), accumulated in float64 so that an update that blew the weights up is
    still measured. The update/weight ratio is taken against the weights the update acted on.
    """
    with torch.no_grad():  # the parameters themselves: no per-tensor detach
        deltas = torch._foreach_sub(list(params), list(before)) if params else []
    return torch.cat([norms(before, device, wide=True), norms(deltas, device, wide=True)])
