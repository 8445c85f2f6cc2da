"""The gradient, weight and update probe of one watched optimizer.

At the step's statistics point (the optimizer's step pre-hook) it takes the per-tensor
gradient norms (foreach reductions) and, on parameter steps, the gradients' max-abs and a
copy of the weights; after the step, the weight and update norms. Everything stays on the
device until the step's transfer adds it to the packet (:meth:`WatchedOptimizer.slices`).

Non-finite counts are computed only for gradients whose norm came back non-finite, so
only an already-broken step pays for a second (small) host read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import repeat
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor
from torch.optim import Optimizer

from ...stats import Plan, Snapshot, large, max_abs, nonfinite_counts, norms, plan, update_stats
from ..attach import WatchedParam

if TYPE_CHECKING:
    from ..step import Packet


def sharded(t: Tensor) -> bool:
    """A DTensor (FSDP2's ``fully_shard`` parameters and gradients)."""
    return type(t).__name__ == "DTensor" and hasattr(t, "full_tensor")


def full_norms(grads: list[Tensor]) -> Tensor:
    """Per-tensor L2 norms of sharded gradients, of the whole (unsharded) tensors: the
    foreach norm of DTensors is a DTensor; ``full_tensor()`` completes it across ranks."""
    return torch.stack([n.full_tensor() for n in torch._foreach_norm(grads)]).float()  # type: ignore[attr-defined]


def lr_of(group: dict[str, Any]) -> float | Tensor:
    """A parameter group's learning rate (a tensor for capturable optimizers)."""
    lr = group.get("lr", math.nan)
    return lr.detach() if isinstance(lr, Tensor) else float(lr)


@dataclass(slots=True)
class Slices:
    """Where one optimizer's gradient, weight and update statistics of one step lie in the
    host vector."""

    step: int
    primary: bool
    present: list[WatchedParam]
    held: dict[int, Tensor]
    counted: dict[int, float] | None
    norms: slice | None
    maxabs: slice | None
    updates: slice | None


@dataclass(slots=True)
class Collected:
    """One step's statistics of one optimizer, on the device until a transfer packs them."""

    step: int
    present: list[WatchedParam]
    norms: Tensor | tuple[Tensor, ...] | list[float] | None = None
    """One vector, or (few tensors: see ``_fast_norms``) one scalar per gradient, or those
    scalars' values once read on the CPU for the step's vitals (``vitals``): they then
    travel as host values, with no op at the transfer."""
    maxabs: Tensor | None = None
    updates: Tensor | None = None
    held: dict[int, Tensor] = field(default_factory=dict)
    """Gradients that are in no ``.grad`` (given by ``autograd.grad``, or of a skipped
    update), kept until they are counted."""
    counted: dict[int, float] | None = None
    """Non-finite values per gradient, when counted at the step's statistics point."""


@dataclass(slots=True)
class WatchedOptimizer:
    """One watched optimizer, its parameters and its steps' statistics on the device."""

    optimizer: Optimizer
    params: list[WatchedParam]
    steps: int = 0
    """Steps this optimizer has taken; its statistics are recorded under this count."""
    # the step in progress: set at the statistics point, kept in ``done`` after the step
    now: Collected | None = None
    done: list[Collected] = field(default_factory=list)
    """Steps whose statistics wait for the next transfer (see ``steps``: every few steps)."""
    before: list[Tensor] | Snapshot | None = None
    held: dict[int, Tensor] = field(default_factory=dict)
    """Gradients of a skipped (non-finite) update, kept until they are counted."""
    manual: bool = False
    """Hand-written updates (no optimizer): nothing is ever skipped or clipped."""
    given: dict[int, Tensor] = field(default_factory=dict)
    """Gradients ``torch.autograd.grad`` returned (they are in no ``.grad``)."""
    _big: tuple[int, bool] | None = None
    """(id of the parameter list, whether its tensors are few and large: ``stats.large``)."""
    _plan: tuple[int, Plan | None] | None = None
    """(id of the parameter list, how its tensors reduce stacked: ``stats.plan``)."""
    step_plan: Plan | None = None
    """The plan of this step's tensors (None when a gradient is missing)."""
    _ids: tuple[int, frozenset[int]] | None = None
    _uniform: tuple[tuple[Any, ...], bool] | None = None
    ready: bool = False
    """This step's statistics were read (at the program's clip or its scaler's
    ``unscale_``, before the optimizer's step): its step pre-hook reads nothing more."""
    unread: int | None = None
    """This step, when its gradients are not read (a lean step, see ``cadence``): a
    non-finite loss at the next step's vitals asks whether its update wrote what it came
    from (:meth:`unread_nonfinite`)."""
    unread_before: int | None = None
    """The step before's, as ``unread``."""

    def unread_nonfinite(self) -> tuple[int, dict[str, int]] | None:
        """The step before this one, when its gradients went unread and were non-finite:
        (that step, the non-finite values each parameter's gradient left). Read from what
        its update left, one fused count, with nothing held from the lean step (reading a
        ``.grad`` makes a Python object a tensor, every step): the optimizer's first moment
        where it keeps one (Adam's ``exp_avg``, SGD's ``momentum_buffer``: non-finite when a
        gradient was, and only then, whatever the update's own arithmetic did), else the
        weight the update wrote."""
        step, self.unread_before = self.unread_before, None
        if step is None or step != self.steps - 1 or not self.params:
            return None
        state = self.optimizer.state
        left = []
        for w in self.params:
            kept = state.get(w.param) or {}
            moment = kept.get("exp_avg", kept.get("momentum_buffer"))
            left.append(moment if isinstance(moment, Tensor) else w.param.detach())
        if sharded(left[0]):
            return None  # a count of DTensors is a DTensor: not read here
        counts = nonfinite_counts(left).tolist()
        bad = {w.name: int(c) for w, c in zip(self.params, counts) if c}
        return (step, bad) if bad else None

    @property
    def present(self) -> list[WatchedParam]:
        """The parameters that had a gradient at this step's statistics point."""
        return self.now.present if self.now is not None else []

    @property
    def grad_norms(self) -> Tensor | None:
        """This step's gradient norms (on the device) as one vector, when taken."""
        now = self.now
        if now is None or now.norms is None:
            return None
        now.norms = _vector(now.norms)
        return now.norms

    def grad(self, w: WatchedParam) -> Tensor | None:
        """The gradient this step uses for ``w``."""
        g = self.given.get(w.id)
        if g is None:
            g = self.held.get(w.id)
        return g if g is not None else w.param.grad

    def with_grads(self) -> tuple[list[WatchedParam], list[Tensor]]:
        """The parameters that have a gradient this step, and those gradients.

        NOTE: the common step (every gradient in ``.grad``) costs one pass of attribute
        reads and no Python call per tensor (see ``tests/test_width.py``)."""
        if self.given or self.held:
            pairs = [(w, g) for w in self.params if (g := self.grad(w)) is not None]
            return [w for w, _ in pairs], [g for _, g in pairs]
        grads = [w.param.grad for w in self.params]
        if not [i for i, g in enumerate(grads) if g is None]:
            return self.params, grads  # type: ignore[return-value]
        present = [w for w, g in zip(self.params, grads) if g is not None]
        return present, [g for g in grads if g is not None]

    def big(self, tensors: list[Tensor]) -> bool:
        """Whether this optimizer's tensors are few and large (asked once per parameter set)."""
        if self._big is None or self._big[0] != id(self.params):
            self._big = (id(self.params), large(tensors))
        return self._big[1]

    def plan(self, present: list[WatchedParam], tensors: list[Tensor]) -> Plan | None:
        """How this optimizer's tensors reduce stacked by shape (made once per parameter
        set, only for a step with every gradient: then ``present`` is ``params``)."""
        if present is not self.params:
            return None
        if (
            self._plan is None
            or self._plan[0] != id(self.params)
            or (self._plan[1] is not None and self._plan[1].broken)
        ):
            self._plan = (id(self.params), plan(tensors))
        return self._plan[1]

    def uniform(self, grads: list[Tensor]) -> bool:
        """Every gradient dense, on one device, of one dtype (asked once per parameter set,
        then only of the first gradient): their norms take one foreach call."""
        first = grads[0] if grads else None
        key = (id(self.params), len(grads)) + (
            (first.device, first.dtype, first.layout) if first is not None else ()
        )
        if self._uniform is None or self._uniform[0] != key:
            kinds = {(g.device, g.dtype, g.layout) for g in grads}
            same = first is not None and len(kinds) == 1 and first.layout is torch.strided
            self._uniform = (key, same and device_foreach(first.device))  # type: ignore[union-attr]
        return self._uniform[1]

    def ids(self) -> frozenset[int]:
        """The ids of this optimizer's parameters (made once per parameter set)."""
        if self._ids is None or self._ids[0] != id(self.params):
            self._ids = (id(self.params), frozenset(id(w.param) for w in self.params))
        return self._ids[1]

    def collected(self) -> bool:
        """Statistics wait for a transfer."""
        return bool(self.done) or self.now is not None

    def collect(self, want_grads: bool, want_params: bool, device: Any) -> bool:
        """The statistics point: gradient norms, and on parameter steps max-abs and the
        weights before the update; True when the gradients are sharded (FSDP2: norms of
        the full gradients, per-shard statistics skipped)."""
        self.unread_before, self.unread = self.unread, None
        if not (want_grads or self.manual):  # asked of at the next step's vitals
            self.unread = self.steps
        if not (want_grads or want_params):
            return False
        present, grads = self.with_grads()
        now = self.now = Collected(self.steps, present, held={**self.given, **self.held})
        split = bool(grads) and sharded(grads[0])
        want_params = want_params and not split
        self.step_plan = None if split else self.plan(present, grads)
        if want_grads:
            if split:
                now.norms = full_norms(grads)
            elif self.step_plan is None and self.uniform(grads):
                now.norms = _fast_norms(grads)
            else:
                now.norms = norms(grads, device, plan=self.step_plan)
        if want_params:
            now.maxabs = max_abs(grads, device, self.big(grads), self.step_plan)
            with torch.no_grad():  # copies that record no graph
                weights: list[Tensor] = [w.param for w in present]
                if self.step_plan is not None:  # stacked by shape: the stack is the copy
                    self.before = Snapshot(self.step_plan, weights)
                else:
                    self.before = list(torch._foreach_mul(weights, 1.0)) if weights else []
        return split

    def recheck(self, device: Any) -> tuple[bool, float]:
        """A non-finite norm: NaN/Inf in a gradient, or finite values so large (> ~1e19)
        that float32 squares overflow. Count the non-finite values and take the norms in
        float64; return (any value non-finite, the global norm in float64). Only a broken
        step pays for this second (small) host read.

        NOTE: mistaking enormous finite gradients for NaN would skip updates the user's
        optimizer makes without gradoc, and hide an explosion behind a "NaN".
        """
        grads = [g for g in map(self.grad, self.present) if g is not None]
        if not grads or sharded(grads[0]):
            return True, math.inf
        wide = norms(grads, device, wide=True)
        counts = nonfinite_counts(grads, device)
        read = torch.cat([counts.to(wide), torch.linalg.vector_norm(wide)[None]]).tolist()
        now = self.now
        assert now is not None  # a recheck follows a collect
        now.norms = wide
        # counted now: the gradients are gone by the time the step's statistics travel
        # (the program's zero_grad, or a hand-written update's next backward)
        now.counted = {w.id: c for w, c in zip(now.present, read[:-1])}
        return sum(read[:-1]) > 0, read[-1]

    def drop_grads(self) -> None:
        """Skip the update: the optimizer skips parameters without a gradient."""
        for w in self.params:
            if w.param.grad is not None:
                self.held[w.id] = w.param.grad  # counted at the transfer
            w.param.grad = None
        if self.now is not None:
            self.now.held |= self.held
        self.before = None  # no update to measure: an update not made is not a tiny one

    def stepped(self, device: Any) -> None:
        """After the update: its norms; a skipped step's gradients go back where the user
        left them."""
        now, self.now = self.now, None
        if self.before is not None and now is not None:
            weights = [w.param for w in now.present]
            if isinstance(self.before, Snapshot):
                now.updates = self.before.update_stats(weights, device)
            else:
                now.updates = update_stats(weights, self.before, device, self.step_plan)
        self.before = None
        if self.held:
            for w in self.params:
                if w.id in self.held and w.param.grad is None:
                    w.param.grad = self.held[w.id]
            self.held = {}
        if now is not None:
            self.done.append(now)
        self.steps += 1

    def slices(self, pack: Packet, primary: bool) -> list[Slices]:
        """Add the waiting steps' statistics to the packet; where each step's will lie.

        NOTE: the gradient norms of steps that share their parameter list (every gradient
        present: the list is ``params`` itself) travel as one stacked packet part, their
        places found by arithmetic: a transfer of many steps costs a fixed number of
        packet parts, not one per step."""
        waiting = self.done if self.now is None else [*self.done, self.now]
        self.done, self.now = [], None
        out: list[Slices] = []
        run: list[Collected] = []
        for c in waiting:
            joins = c.norms is not None and c.maxabs is None and c.updates is None
            if c.norms is not None and not joins:
                c.norms = _vector(c.norms)
            if run and not (
                joins and c.present is run[0].present and type(c.norms) is type(run[0].norms)
            ):
                out += _stacked(pack, run, primary)
                run = []
            if joins:
                run.append(c)
                continue
            norms_, maxabs, updates = (
                pack.add(v) if v is not None else None  # type: ignore[arg-type]  # stacked above
                for v in (c.norms, c.maxabs, c.updates)
            )
            out.append(
                Slices(c.step, primary, c.present, c.held, c.counted, norms_, maxabs, updates)
            )
        if run:
            out += _stacked(pack, run, primary)
        return out


def _vector(norms: Tensor | tuple[Tensor, ...] | list[float]) -> Tensor:
    """A step's gradient norms as one vector: the foreach call's scalars stacked, the
    values read for the vitals as a float64 tensor (see ``Collected.norms``)."""
    if isinstance(norms, tuple):
        return torch.stack(norms)
    if isinstance(norms, list):
        return torch.tensor(norms, dtype=torch.float64)
    return norms


def _stacked(pack: Packet, run: list[Collected], primary: bool) -> list[Slices]:
    """Steps that took only gradient norms of the same parameters: one packet part."""
    first = run[0].norms
    if isinstance(first, list):  # read on the host already: one tensor of them all
        at = pack.add(torch.tensor([v for c in run for v in c.norms], dtype=torch.float64))  # type: ignore[union-attr]
    elif isinstance(first, tuple):  # scalars: one stack of them all
        at = pack.add(torch.stack([t for c in run for t in c.norms]))  # type: ignore[union-attr,misc]
    elif first is not None:
        at = pack.add(torch.stack([c.norms for c in run]) if len(run) > 1 else first)  # type: ignore[misc]
    else:  # pragma: no cover - a run holds steps that took norms
        return []
    n = len(run[0].present)
    return [
        Slices(
            c.step,
            primary,
            c.present,
            c.held,
            c.counted,
            slice(at.start + k * n, at.start + (k + 1) * n),
            None,
            None,
        )
        for k, c in enumerate(run)
    ]


def device_foreach(device: torch.device) -> bool:
    """PyTorch's foreach norm runs on the device (not MPS, whose statistics stay float32 via
    ``stats.norms``)."""
    return device.type != "mps"


FEW = 32
"""Up to this many gradients, a step's norms stay the foreach call's scalars: stacked with
other steps' at a transfer, read one by one (on the CPU) for the step's vitals."""


def _fast_norms(grads: list[Tensor]) -> Tensor | tuple[Tensor, ...]:
    """The L2 norm of each of ``grads`` (dense, one device, one dtype), accumulated in
    float32 or wider, in that dtype (cast to float64 when the packet is read): one vector,
    or for ``FEW`` gradients or fewer the foreach call's scalars.

    NOTE: a step's one reduction, with no other op: ``stats.norms`` adds a grouping, a
    stack and a cast around the same kernel; right after a backward each op costs ~10-25 us
    (caches taken by the backward), ~10% of a 0.5 ms step for the three."""
    dtype = grads[0].dtype
    found = (
        torch._foreach_norm(grads)
        if dtype in (torch.float32, torch.float64)
        else torch._foreach_norm(grads, 2, dtype=torch.float32)
    )
    return tuple(found) if len(grads) <= FEW else torch.stack(found)


def received_counts(sl: Slices, host: Tensor) -> dict[int, float]:
    """Non-finite values per gradient of one optimizer's statistics on the host; a norm
    that overflowed float32 while every value is finite is measured again in float64."""
    if sl.counted is not None:  # counted and measured in float64 at the step
        return {k: v for k, v in sl.counted.items() if v}
    if sl.norms is None:
        return {}
    # A gradient holding NaN/Inf has a non-finite norm; only those are counted.
    # NOTE: read right after the step when nothing is decided before updates (see
    # ``steps``): the grads are still there (zero_grad comes later), so the counts
    # describe exactly the gradients this step used.
    counts: dict[int, float] = {}
    bad, grads = [], []
    values = host[sl.norms].tolist()
    if math.isfinite(sum(values)):
        return counts  # every norm finite (one C-level pass: no Python call per tensor)
    for i, v in enumerate(values):
        w = sl.present[i]
        g = sl.held.get(w.id, w.param.grad)
        if not math.isfinite(v) and g is not None:
            bad.append(i)
            grads.append(g)
    if grads and not sharded(grads[0]):
        # counted, and measured again in float64: a norm can overflow float32 while every
        # value is finite (enormous gradients, not NaN)
        values = torch.cat([nonfinite_counts(grads), norms(grads, wide=True)]).tolist()
        n = len(grads)
        for k, i in enumerate(bad):
            counts[sl.present[i].id] = values[k]
            if values[k] == 0:
                host[sl.norms.start + i] = values[n + k]
    return counts


def grad_rows(
    targets: list[Slices], counts: dict[tuple[int, int], float], host: np.ndarray[Any, Any]
) -> tuple[list[tuple[Any, ...]], dict[int, tuple[float, int]]]:
    """The ``param_arrays`` rows of a transfer (on the writer thread): one per optimizer and
    step, its statistics as packed arrays; per step of the first optimizer, its squared
    global norm and non-finite count (the ``steps`` table's).

    NOTE: slices of the host vector written as they are: no Python object per tensor, so
    a wide model's rows cost one insert and do not hold the GIL against the training
    thread per tensor (the ids of a parameter list are packed once per transfer)."""
    rows: list[tuple[Any, ...]] = []
    primary: dict[int, tuple[float, int]] = {}
    packed: dict[int, tuple[list[int], bytes]] = {}
    skip = 0
    for k, sl in enumerate(targets):
        if skip:  # a step of the run cut above
            skip -= 1
            continue
        n = len(sl.present)
        if not n:
            continue
        if id(sl.present) not in packed:
            ids_ = [w.id for w in sl.present]
            packed[id(sl.present)] = (ids_, np.array(ids_, dtype="<i4").tobytes())
        ids, ids_blob = packed[id(sl.present)]
        run = 0 if counts else _norms_run(targets, k)
        if run > 1:  # healthy steps that took only these norms, side by side: one array
            assert sl.norms is not None  # a run's steps took norms
            start, width = sl.norms.start, 8 * n
            block = host[start : start + run * n]
            raw: bytes = _blob(block)  # type: ignore[assignment]
            steps_ = [step_sl.step for step_sl in targets[k : k + run]]
            if sl.primary:  # each step's squared norm, as one step's row would have it
                primary.update(zip(steps_, zip(_squares(block.reshape(run, n)), repeat(0))))
            rows += [
                (step, ids[0], ids_blob, raw[i * width : (i + 1) * width], None, b"", None, None)
                for i, step in enumerate(steps_)
            ]
            skip = run - 1
            continue
        norms_, maxabs, updates = (
            host[at] if at is not None else None for at in (sl.norms, sl.maxabs, sl.updates)
        )
        # counts were taken only where the norm was non-finite; elsewhere they are 0
        bad: bytes | None = None
        if norms_ is not None:
            mine = [counts.get((sl.step, i), 0.0) for i in ids] if counts else []
            bad = _blob(np.array(mine)) if any(mine) else b""
            if sl.primary:
                primary[sl.step] = (_squares(norms_[None])[0], int(sum(mine)))
        weights, deltas = (updates[:n], updates[n:]) if updates is not None else (None, None)
        stats = (_blob(norms_), _blob(maxabs), bad, _blob(weights), _blob(deltas))
        rows.append((sl.step, ids[0], ids_blob, *stats))
    return rows, primary


def _norms_run(targets: list[Slices], k: int) -> int:
    """How many slices from ``k`` on are steps that took only gradient norms, of the same
    parameters, lying one after the other in the host vector (a stacked transfer's, see
    ``_stacked``): their rows are cut from one array, with no Python call per step."""
    first = targets[k]
    if first.norms is None or first.maxabs is not None or first.updates is not None:
        return 0
    n, run = len(first.present), 1
    for sl in targets[k + 1 :]:
        joins = (
            sl.present is first.present
            and sl.primary == first.primary
            and sl.maxabs is None
            and sl.updates is None
            and sl.norms is not None
            and sl.norms.start == first.norms.start + run * n
        )
        if not joins:
            break
        run += 1
    return run


def _squares(rows: np.ndarray[Any, Any]) -> list[float]:
    """Each row's sum of squares (a step's squared global norm from its gradients' norms):
    one pass for a run of steps, the same arithmetic for one step alone."""
    return np.einsum("ij,ij->i", rows, rows).tolist()  # type: ignore[no-any-return]


def _blob(values: np.ndarray[Any, Any] | None) -> bytes | None:
    """A float64 little-endian array as stored (``None``: not collected)."""
    return None if values is None else np.ascontiguousarray(values, dtype="<f8").tobytes()
