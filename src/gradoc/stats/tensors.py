"""Per-tensor reductions over lists of tensors (gradients, weights, updates)."""

from __future__ import annotations

import contextlib
import math
import operator
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
RowReduce = Callable[[Tensor], Tensor]
"""A reduction of each row of a ``(tensors, elements)`` matrix (tensors of one shape)."""

PLAN_MIN = 32
"""Tensors sharing their shapes from which a :class:`Plan` reduces them stacked."""
STACK_MAX = 1 << 22
"""Elements copied by one stack of a plan (a bound on its transient memory)."""
STACK_NUMEL = 2048
"""Largest tensor a plan stacks: beyond, the copy costs more than foreach's call per
tensor (measured on CPU, 200 tensors: at 2,048 elements both take ~0.2-0.5 ms; at 256,
stacked 0.04 ms against 0.27 ms)."""


class Plan:
    """How to reduce one list of tensors (a parameter set's) in a few calls whatever its
    length: tensors of one shape are stacked and reduced along a dimension, the rest by
    foreach kernels. Made once per parameter set (:func:`plan`).

    NOTE: on CPU a foreach reduction is a loop of one kernel per tensor (~1.2 µs each,
    3.7 ms for 2,000 small gradients); stacked by shape, the same norms took 0.6 ms,
    bit-identical (measured for this change, see ``benchmarks/width.py``). Whatever the
    list holds when the plan runs, a stack that succeeds reduces the tensors it was given,
    so a plan is never wrong, at worst refused (a changed shape or device: the stack
    raises, the caller falls back and makes a new plan).
    """

    __slots__ = ("broken", "groups", "n", "order", "rest")

    def __init__(self, n: int, rest: list[int], groups: list[list[int]], device: torch.device):
        self.n = n
        # itemgetter: the tensors of a group in one C call (a tuple: a group has two or more)
        self.rest = operator.itemgetter(*rest, *rest[:1]) if rest else None
        """The tensors reduced by foreach (the first one twice, so that one is a tuple too)."""
        self.groups = [(operator.itemgetter(*g), len(g)) for g in groups]
        concat = rest + [i for g in groups for i in g]  # the order the parts come in
        order = torch.empty(n, dtype=torch.long)
        order[torch.tensor(concat, dtype=torch.long)] = torch.arange(n)
        self.order = order.to(device)
        """For each input position, where its value lies in the concatenated parts."""
        self.broken = False

    def rest_of(self, tensors: Sequence[Tensor]) -> list[Tensor]:
        """The tensors this plan leaves to foreach (none when every tensor is stacked)."""
        return list(self.rest(tensors))[:-1] if self.rest is not None else []

    def ordered(self, parts: list[Tensor]) -> Tensor:
        """The foreach part (first, if any) and the groups' parts back in input order."""
        return torch.cat(parts).index_select(0, self.order)

    def run(self, tensors: Sequence[Tensor], rest: GroupReduce, rows: RowReduce) -> Tensor | None:
        """One value per tensor in input order, in the reductions' dtype; None (and the
        plan broken) when the tensors no longer fit it."""
        if self.broken or len(tensors) != self.n:
            return None
        try:
            parts = [rows(torch.stack(get(tensors)).view(k, -1)) for get, k in self.groups]
            if some := self.rest_of(tensors):
                first = some[0]
                parts.insert(0, torch.stack(list(rest(first.device, first.dtype, some))))
            return self.ordered(parts)
        except (RuntimeError, TypeError):
            self.broken = True
            return None


class Snapshot:
    """Copies of a parameter set's weights before an update, laid out by its plan: each
    shape group as one stacked matrix (the stack is the copy), the rest copied one by one."""

    __slots__ = ("groups", "plan", "rest")

    def __init__(self, plan: Plan, weights: Sequence[Tensor]) -> None:
        self.plan = plan
        self.groups = [torch.stack(get(weights)).view(k, -1) for get, k in plan.groups]
        some = plan.rest_of(weights)
        self.rest: list[Tensor] = list(torch._foreach_mul(some, 1.0)) if some else []

    def update_stats(self, params: Sequence[Tensor], device: torch.device | None) -> Tensor | None:
        """``[weight norms before..., update norms...]`` in input order, float64 (as
        :func:`update_stats`), or None when the parameters no longer fit the plan (the
        step's updates are then not measured: nothing to compare the weights with)."""
        plan = self.plan
        if len(params) != plan.n:
            return None
        try:
            before = [_rows_l2_wide(g) for g in self.groups]
            deltas = [
                _rows_l2_wide(torch.stack(get(params)).view(k, -1).sub_(g))
                for (get, k), g in zip(plan.groups, self.groups)
            ]
            if after := plan.rest_of(params):
                dev = self.rest[0].device
                before.insert(0, torch.stack(list(_l2_wide(dev, after[0].dtype, self.rest))))
                moved = list(torch._foreach_sub(after, self.rest))
                deltas.insert(0, torch.stack(list(_l2_wide(dev, after[0].dtype, moved))))
            out = torch.cat([plan.ordered(before), plan.ordered(deltas)])
            return out.to(device=device or out.device, dtype=torch.float64)
        except (RuntimeError, TypeError):
            plan.broken = True
            return None


def plan(tensors: Sequence[Tensor]) -> Plan | None:
    """A :class:`Plan` for a wide list of CPU tensors (at least ``PLAN_MIN`` small ones
    sharing shapes, one dtype, dense), else None (foreach is as fast).

    NOTE: CPU only. On an accelerator a foreach reduction is a fused kernel over many
    tensors, not a kernel per tensor; whether stacking pays there is not measured (no GPU
    on the machine this was written on), so those keep foreach."""
    if len(tensors) < PLAN_MIN:
        return None
    kinds = {(t.device, t.dtype, t.layout) for t in tensors}
    (device, _, layout), *others = kinds
    if others or device.type != "cpu" or layout is not torch.strided:
        return None
    by_shape: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for i, t in enumerate(tensors):
        if 0 < t.numel() <= STACK_NUMEL:  # an empty tensor has no max
            by_shape[tuple(t.shape)].append(i)
    groups = []
    for shape, idx in by_shape.items():
        if len(idx) > 1:
            per = max(2, STACK_MAX // math.prod(shape))
            chunks = [idx[c : c + per] for c in range(0, len(idx), per)]
            if len(chunks[-1]) == 1:  # a group holds two or more (itemgetter's tuple)
                chunks[-2] += chunks.pop()
            groups += chunks
    if sum(map(len, groups)) < PLAN_MIN:
        return None
    stacked = {i for g in groups for i in g}
    rest = [i for i in range(len(tensors)) if i not in stacked]
    return Plan(len(tensors), rest, groups, tensors[0].device)


def _per_tensor(
    tensors: Sequence[Tensor],
    device: torch.device | None,
    reduce: GroupReduce,
    planned: tuple[Plan | None, RowReduce] | None = None,
) -> Tensor:
    """One scalar per tensor as a float64 vector in input order.

    ``reduce`` gets the tensors of one (device, dtype) group at a time, so foreach kernels,
    which need a single device and dtype, see whole groups; ``planned``: a plan of this
    list and the same reduction of the rows of a matrix, used when the plan fits.
    """
    if not tensors:
        return torch.zeros(0, dtype=torch.float64, device=device)
    if planned is not None and planned[0] is not None:
        with torch.no_grad():
            stacked = planned[0].run(tensors, reduce, planned[1])
        if stacked is not None:
            dev = stacked.device
            return stacked.to(device=device or dev, dtype=_wide(device or dev))
    kinds = {(t.device, t.dtype, t.layout) for t in tensors}  # attribute reads, no calls
    if len(kinds) == 1:
        # NOTE: the common case (one device, one dtype, dense) costs a fixed number of
        # Python calls whatever the tensor count: no per-tensor detach, grouping or cast.
        # Under no_grad, reducing tensors that require grad records no graph.
        ((dev, dtype, layout),) = kinds
        if layout is torch.strided:
            with torch.no_grad():
                out_dtype = _wide(device or dev)
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
    out_dtype = _wide(device)
    if len(groups) == 1:  # the common case: one stack, one cast
        return torch.stack(values).to(device=device, dtype=out_dtype)
    return torch.stack([v.to(device=device, dtype=out_dtype) for v in values])


def _acc(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _wide(device: torch.device) -> torch.dtype:
    """float64 where the device has it (MPS has not): the statistics' vectors, and squares
    of weights an update made huge (1e20) that must still give a finite norm."""
    return torch.float32 if device.type == "mps" else torch.float64


def _l2(dev: torch.device, dtype: torch.dtype, ts: list[Tensor]) -> Sequence[Tensor]:
    return torch._foreach_norm(ts, 2, dtype=_acc(dtype))


def _l2_wide(dev: torch.device, dtype: torch.dtype, ts: list[Tensor]) -> Sequence[Tensor]:
    return torch._foreach_norm(ts, 2, dtype=_wide(dev))


def _rows_l2(m: Tensor) -> Tensor:
    out: Tensor = torch.linalg.vector_norm(m, dim=1, dtype=_acc(m.dtype))
    return out


def _rows_l2_wide(m: Tensor) -> Tensor:
    out: Tensor = torch.linalg.vector_norm(m, dim=1, dtype=_wide(m.device))
    return out


def _rows_max_abs(m: Tensor) -> Tensor:
    return m.abs().amax(dim=1)  # NaN propagates, as in the foreach max


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
    caller's business (:class:`~gradoc.collect.probes.grads.WatchedOptimizer` asks once per
    parameter set)."""
    return sum([t.numel() for t in tensors]) >= _LARGE * max(1, len(tensors))


def _nonfinite(dev: torch.device, dtype: torch.dtype, ts: list[Tensor]) -> Sequence[Tensor]:
    return [(~torch.isfinite(t)).sum() for t in ts]


def norms(
    tensors: Sequence[Tensor],
    device: torch.device | None = None,
    wide: bool = False,
    plan: Plan | None = None,
) -> Tensor:
    """L2 norm of each tensor, accumulated in float32 (fp16 squares overflow), or in
    float64 with ``wide`` (values beyond ~1e19 square past float32's range), as one vector
    (``plan``: the list's :class:`Plan`, when it has one).

    >>> norms([torch.ones(4), torch.zeros(2)]).tolist()
    [2.0, 0.0]
    """
    rows = _rows_l2_wide if wide else _rows_l2
    return _per_tensor(tensors, device, _l2_wide if wide else _l2, (plan, rows))


def max_abs(
    tensors: Sequence[Tensor],
    device: torch.device | None = None,
    big: bool | None = None,
    plan: Plan | None = None,
) -> Tensor:
    """Largest absolute value of each tensor (NaN if it holds a NaN), as one vector
    (``big``: whether the tensors are few and large, see :func:`large`, when known;
    ``plan``: the list's :class:`Plan`).

    >>> max_abs([torch.tensor([-3.0, 2.0])]).tolist()
    [3.0]
    """
    reduce: GroupReduce = lambda dev, dtype, ts: _max_abs(dev, ts, big)  # noqa: E731
    return _per_tensor(tensors, device, reduce, (plan, _rows_max_abs))


def nonfinite_counts(tensors: Sequence[Tensor], device: torch.device | None = None) -> Tensor:
    """Number of NaN/Inf values in each tensor, as one vector.

    The collector calls this only for gradients whose norm came back non-finite, so a
    healthy step never pays for the extra pass.

    >>> nonfinite_counts([torch.tensor([1.0, float("nan"), float("inf")])]).tolist()
    [2.0]
    """
    return _per_tensor(tensors, device, _nonfinite)


def update_stats(
    params: Sequence[Tensor],
    before: Sequence[Tensor],
    device: torch.device | None = None,
    plan: Plan | None = None,
) -> Tensor:
    """Per-parameter ``[weight L2 norms before the step..., update L2 norms...]`` (update =
    after - before), accumulated in float64 so that an update that blew the weights up is
    still measured. The update/weight ratio is taken against the weights the update acted on.
    (A :class:`Snapshot` of the weights has its own ``update_stats``.)
    """
    with torch.no_grad():  # the parameters themselves: no per-tensor detach
        deltas = torch._foreach_sub(list(params), list(before)) if params else []
    return torch.cat(
        [norms(before, device, wide=True, plan=plan), norms(deltas, device, wide=True, plan=plan)]
    )
