"""Probes of the watched modules' outputs: activation statistics and AMP ranges.

On activation steps one global forward hook summarises each watched module's output on its
device (it exists only on those steps, so other steps pay nothing); a small output is
copied instead and summarised with the step's other outputs of its shape when the step's
transfer adds the summaries to the packet. The first loss's autograd
graph says which modules feed an activation function written as a call (``F.relu``, see
``functional``), so their dead and saturated units are counted as for a module.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn as nn
from torch import Tensor
from torch.utils.hooks import RemovableHandle

from ..._util import entry
from ..._util.json_types import JsonObject
from ..._util.wrappers import traced
from ...locate.replay import own_work
from ...stats import activation_stats, activation_stats_rows, combine, saturation_rule, unit_dim
from ...stats.precision import EXP_MIN, RANGE_FIELDS, exponent_histogram, merge_counts, range_counts
from ...store.writer import real
from .._safety import guarded
from ..attach import PRE_ACTIVATION_SATURATION, SKIPPED, WatchedModule, functional_activations
from ..probe import Probe
from .locating import first_tensor

if TYPE_CHECKING:
    from ..._util.objects import IdMap
    from ..context import Context
    from ..step import Packet
    from .grads import WatchedOptimizer


Call = tuple[int, Tensor, "Tensor | None"]
"""One forward call's output summarised on the device: (numel, stats, per-unit activity)."""
Calls = list[tuple[int, slice, slice | None]]
"""One module's activation statistics per forward call: (numel, stats, per-unit activity)."""

EARLY_CALLS = 8
"""Forward calls of one module summarised at most before the run knows its model."""
EARLY_MAX = 10_000
"""Module calls summarised at most before the run knows its model (then it stops looking:
a program that never trains pays nothing more)."""
BATCH_NUMEL = 4096
"""Outputs at most this large are copied and summarised together with the step's other
outputs of their shape (see :meth:`Activations.on_output`)."""
STAGED_MAX = 1 << 22
"""Elements of copied outputs held at most before they are summarised."""


class Activations(Probe):
    """Per watched module and forward call: statistics of its output (see ``stats``)."""

    def __init__(
        self,
        run: Context,
        schedule: Callable[[int], bool],
        budget: int,
        others: list[Callable[[WatchedModule, nn.Module, Tensor], None]],
    ) -> None:
        """``others``: the run's other probes that read module outputs (``probe.Points``)."""
        self.run, self.schedule, self.budget, self._others = run, schedule, budget, others
        self._scheduled = 0  # steps of the schedule so far
        self._asked: tuple[int, bool] | None = None  # the last step asked about, its answer
        self._handles: list[RemovableHandle] = []
        self._calls: dict[int, list[Call]] = {}
        self._staged: dict[tuple[Any, ...], list[tuple[int, Tensor]]] = {}
        """Small outputs of this step by (shape, dtype, device, saturation, units): copies."""
        self._staged_numel = 0
        self._groups: list[tuple[list[int], int, Tensor, Tensor | None]] = []
        """Summarised staged outputs: (module ids, numel of one, (k, 5) vectors, actives)."""
        self._scratch: dict[torch.dtype, Tensor] = {}
        self._produced: dict[Any, WatchedModule] = {}  # output node -> module, one step
        self._functional: dict[str, str] | None = None  # module -> F.relu/tanh after it
        self._early: dict[int, tuple[weakref.ref[nn.Module], list[Call]]] = {}
        """Outputs seen before the run knew its model (``gradoc run``'s first step), per
        module: adopted by the modules the run then watches (:meth:`adopt`)."""
        self._early_hook: RemovableHandle | None = None
        self._early_calls = 0

    @property
    def armed(self) -> bool:
        return bool(self._handles)

    def wanted(self, step: int) -> bool:
        """Whether ``step`` collects activations: a step of the schedule, and for a model with
        more watched modules than the budget only every k-th of those (see
        ``WatchConfig.activation_modules``): the cost per step stays that of ``budget``
        modules, and every module is summarised on the same steps."""
        if self._asked is not None and self._asked[0] == step:
            return self._asked[1]
        on = self.schedule(step)
        if on:
            every = -(-len(self.run.watched.modules) // self.budget)
            on = self._scheduled % max(1, every) == 0
            self._scheduled += 1
        self._asked = (step, on)
        return on

    def arm(self, on: bool) -> None:
        """One global forward hook, present only on the steps that collect activations."""
        if on and not self._handles:
            self._handles = [entry.every_forward_hook(self._module_output)]
        elif not on and self._handles:
            for h in self._handles:
                h.remove()
            self._handles = []

    def _module_output(self, module: nn.Module, args: Any, output: Any) -> None:
        if traced():  # a compiled model's modules: not watched inside (see docs/gradoc-run.md)
            return
        watched = self.run.watched.modules.get(module)
        if watched is not None and torch.is_grad_enabled():
            self._on_output(watched, module, output)

    @guarded
    def _on_output(self, watched: WatchedModule, module: nn.Module, output: Any) -> None:
        x = first_tensor(output)
        if x is None or x.numel() == 0 or x.is_complex():
            return
        self.on_output(watched, module, x)
        for on_output in self._others:
            on_output(watched, module, x)

    def on_output(self, watched: WatchedModule, module: nn.Module, x: Tensor) -> None:
        units = unit_dim(module, x)
        n = x.numel()
        if n <= BATCH_NUMEL:
            # NOTE: a small output costs its ~18 summary ops in Python and dispatch, not in
            # arithmetic: it is copied (a later in-place op, ReLU(inplace=True), must not
            # change what is summarised) and summarised with the step's other outputs of
            # its shape, ~15 ops a shape (`activation_stats_rows`).
            key = (x.shape, x.dtype, x.device, watched.saturation, units)
            self._staged.setdefault(key, []).append((watched.id, x.detach().clone()))
            self._staged_numel += n
            if self._staged_numel > STAGED_MAX:
                self._summarise_staged()
        else:
            vec, active = activation_stats(x, watched.saturation, units, self._scratch_for(x))
            self._calls.setdefault(watched.id, []).append((n, vec, active))
        if self._functional is None and x.grad_fn is not None:
            self._produced[x.grad_fn] = watched  # read at this step's backward

    def _summarise_staged(self) -> None:
        for (shape, _, _, saturation, units), outputs in self._staged.items():
            ids = [i for i, _ in outputs]
            vec, active = activation_stats_rows(
                torch.stack([t for _, t in outputs]), saturation, units
            )
            self._groups.append((ids, math.prod(shape), vec, active))
        self._staged, self._staged_numel = {}, 0

    def _scratch_for(self, x: Tensor) -> Tensor | None:
        """A reusable CPU buffer as large as the largest watched output.

        NOTE: on the CPU a fresh activation-sized temporary on every activation step costs
        page faults that showed up as ~2% of step time on the overhead benchmark;
        accelerators' caching allocators reuse memory already, so they get none.
        """
        if x.device.type != "cpu" or x.dtype not in (torch.float32, torch.float64):
            return None
        buf = self._scratch.get(x.dtype)
        if buf is None or buf.numel() < x.numel():
            buf = self._scratch[x.dtype] = torch.empty(x.numel(), dtype=x.dtype)
        return buf

    # -- before the model is known (gradoc run) -----------------------------------------
    def watch_early(self) -> None:
        """Summarise the outputs of every module that runs with gradients until the run
        knows its model (``gradoc run`` finds it at the first optimizer step, after the
        first forward): the first step's activations are then the model's, not missing."""
        if self._early_hook is None and self.wanted(0):
            self._early_hook = entry.every_forward_hook(self._early_output)

    def _early_output(self, module: nn.Module, args: Any, output: Any) -> None:
        if traced() or not torch.is_grad_enabled() or isinstance(module, SKIPPED):
            return
        self._early_summary(module, output)

    @guarded
    def _early_summary(self, module: nn.Module, output: Any) -> None:
        entry = self._early.get(id(module))
        if entry is not None and (entry[0]() is not module or len(entry[1]) >= EARLY_CALLS):
            return
        x = first_tensor(output)
        if x is None or x.numel() == 0 or not x.is_floating_point():
            return
        with torch.no_grad(), own_work():
            vec, active = activation_stats(x, saturation_rule(module), unit_dim(module, x))
        if entry is None:
            entry = self._early[id(module)] = (weakref.ref(module), [])
        entry[1].append((x.numel(), vec, active))
        self._early_calls += 1
        if self._early_calls >= EARLY_MAX:  # no model found after this much: stop looking
            self._stop_early()

    def adopt(self, modules: IdMap[nn.Module, WatchedModule]) -> None:
        """The run now watches ``modules``: their outputs seen before become the current
        step's (the first), and the rest is dropped."""
        if self._early_hook is None and not self._early:
            return
        for ref, calls in self._early.values():
            module = ref()
            watched = modules.get(module) if module is not None else None
            if watched is not None and self.run.steps.count == 0:
                self._calls.setdefault(watched.id, []).extend(calls)
        self._stop_early()

    def _stop_early(self) -> None:
        if self._early_hook is not None:
            self._early_hook.remove()
            self._early_hook = None
        self._early = {}

    def on_loss(self, tensors: Any) -> None:
        """Once, at the first loss after a watched output: which watched modules feed an
        activation function (see ``functional``)."""
        if not self._produced or self._functional is not None:
            return
        loss = tensors[0] if isinstance(tensors, (list, tuple)) else tensors
        found = functional_activations(loss, self._produced) if isinstance(loss, Tensor) else []
        self._produced = {}
        self._functional = {w.name: kind for w, kind in found}
        for watched, kind in found:
            if kind in PRE_ACTIVATION_SATURATION and watched.saturation is None:
                watched.saturation = PRE_ACTIVATION_SATURATION[kind]
        if self._functional:
            self.run.set_meta(functional_activations=self._functional)

    def waiting(self) -> bool:
        return bool(self._calls or self._staged or self._groups)

    def pack(self, pack: Packet) -> dict[int, Calls]:
        """Add the outputs' statistics to the packet; where they will lie."""
        acts: dict[int, Calls] = {
            lid: [(n, pack.add(v), pack.add(a) if a is not None else None) for n, v, a in calls]
            for lid, calls in self._calls.items()
        }
        self._summarise_staged()
        for ids, n, vec, active in self._groups:
            # one packet part per group; each output's rows found by arithmetic
            at = pack.add(vec)
            units = pack.add(active) if active is not None else None
            width = active.shape[1] if active is not None else 0
            for row, lid in enumerate(ids):
                v = slice(at.start + 5 * row, at.start + 5 * row + 5)
                a = (
                    slice(units.start + width * row, units.start + width * (row + 1))
                    if units is not None
                    else None
                )
                acts.setdefault(lid, []).append((n, v, a))
        self._calls, self._groups = {}, []
        return acts


class AmpRanges(Probe):
    """``check_amp``: device-side range counts of the sampled steps' outputs and gradients
    (and the gradients' exponent histograms), read once at close: ``meta['amp']``."""

    def __init__(self, run: Context) -> None:
        self.run = run
        self._acts: dict[int, Tensor] = {}
        self._grads: dict[int, tuple[Tensor, Tensor]] = {}
        self._steps = [0, 0]  # activation steps, gradient steps sampled

    def on_output(self, watched: WatchedModule, module: nn.Module, x: Tensor) -> None:
        if x.is_floating_point():
            self._acts[watched.id] = merge_counts(self._acts.get(watched.id), range_counts(x))

    def at_statistics(self, target: WatchedOptimizer, primary: bool) -> None:
        if target.before is None:  # a parameter step only
            return
        self._steps[1] += 1
        for w in target.present:
            g = w.param.grad
            if g is None or not g.is_floating_point():
                continue
            counts, hist = range_counts(g), exponent_histogram(g)
            old = self._grads.get(w.id)
            self._grads[w.id] = (
                (merge_counts(old[0], counts), old[1] + hist) if old else (counts, hist)
            )

    def end_step(self, step: int, activations_seen: bool) -> None:
        if activations_seen:
            self._steps[0] += 1  # this step's outputs were probed

    def close(self, step: int) -> JsonObject:
        run = self.run
        if run.broken:
            return {}
        names = {w.id: w.name for t in run.steps.targets.values() for w in t.params}
        names |= {m.id: m.name for m in run.watched.modules.values()}
        acts = {names[i]: dict(zip(RANGE_FIELDS, v.cpu().tolist())) for i, v in self._acts.items()}
        grads = {}
        for i, (counts, hist) in self._grads.items():
            h = hist.cpu().tolist()
            grads[names[i]] = {
                **dict(zip(RANGE_FIELDS, counts.cpu().tolist())),
                "exponents": {str(EXP_MIN + k): int(c) for k, c in enumerate(h) if c},
            }
        summary = {
            "activation_steps": self._steps[0],
            "gradient_steps": self._steps[1],
            "activations": acts,
            "gradients": grads,
        }
        return {"amp": summary}


def activation_rows(
    step: int, acts: dict[int, Calls], values: list[float], host: np.ndarray[Any, Any]
) -> list[Any]:
    """The ``act_stats`` rows of a transfer (on the writer thread): each module's calls
    of the step, combined (``values``: the host vector as floats, ``host`` as an array,
    whose slices carry the per-unit counts without a Python float each)."""
    return [_act_row(step, lid, calls, values, host) for lid, calls in acts.items()]


def _act_row(
    step: int, lid: int, calls: Calls, values: list[float], host: np.ndarray[Any, Any]
) -> tuple[Any, ...]:
    s = combine(
        [(n, values[v]) for n, v, _ in calls],
        [host[a] if a is not None else None for _, _, a in calls],
    )
    units = s.unit_active
    blob = units.astype("=f4").tobytes() if units is not None else None  # as array("f")
    return (
        step,
        lid,
        len(calls),
        s.numel,
        real(s.mean),
        real(s.std),
        real(s.zero_frac),
        real(s.sat_frac),
        s.nonfinite,
        s.positions,
        blob,
    )
