"""The watched models: their names, their modules' rows and what their forwards did.

Each watched root gets hooks that stay out of the model's pickles and copies (see
``_hooks``; a root that has forward hooks of its own is watched through a global hook that
filters), recording for the step whether a forward ran with gradients, how many samples it
saw, its last call (the padding audit replays it) and, for the probes, each call's inputs.
DDP, DataParallel and ``torch.compile`` wrappers are seen through: layer names have no
``module.`` or ``_orig_mod.`` and a replay runs eagerly on one rank.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn
from torch import Tensor
from torch.utils.hooks import RemovableHandle

from ..._util import objects
from ..._util.json_types import JsonObject
from ..._util.objects import IdMap
from ..._util.state import RngState, rng_state, same_rng
from ..._util.wrappers import compiled, traced, unwrap
from ...locate.origin import user_line_holding
from ...store.writer import insert_rows
from .._safety import guarded
from ..probe import Points, Probe
from ._hooks import global_hooks, local_hooks
from .layers import WatchedModule, assign_prefixes, module_rows, qualified

if TYPE_CHECKING:
    from ..context import Internal


RNG_LOOKS = 3
"""Forwards whose random number generators are compared before and after: a model that drew
no random number in its first three forwards with gradients (no dropout in training, no
sampling inside) needs no RNG state kept for a replay, which repeats it as it was; one that
drew keeps the state before every forward (a replay of a dropout model is exact)."""


def batch_size(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """Samples in one forward call, from the first tensor argument's shape (on the host):
    its first dimension when it has two or more, else 1 (an unbatched call, as an RL
    policy makes per time step)."""
    first = args[0] if args and isinstance(args[0], Tensor) else None  # the common call
    if first is None:
        first = next((a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)), None)
        if first is None:
            return 1
    shape = first.shape
    return int(shape[0]) if len(shape) >= 2 else 1


class Watched:
    def __init__(self, run: Internal, probes: list[Probe], names: IdMap[nn.Module, str]) -> None:
        self.run, self.probes = run, probes
        self.points = Points(probes)
        self.keep_rng = any(p.wants_rng for p in probes)
        self._rng_looks = 0
        self.prefixes: IdMap[nn.Module, str] = IdMap()  # watched root modules -> name prefix
        self.names = names
        """Every watched module's name in the run's layer names (filled here)."""
        self.modules: IdMap[nn.Module, WatchedModule] = IdMap()
        self.next_id = 0
        """The next layer id (parameters' and modules' rows share them)."""
        self.handles: list[RemovableHandle] = []
        self._roots: dict[int, nn.Module] = {}  # id -> watched root (the hooks' filter)
        self._global: list[RemovableHandle] = []
        self._calls: dict[int, list[tuple[tuple[Any, ...], RngState]]] = {}
        """Per watched root, its forward calls in progress: (args, RNG state before)."""
        self.last_forward: tuple[nn.Module, Any, Any] | None = None
        self.forward_at: JsonObject | None = None
        """Where the program first called a watched root with gradients (:func:`_called_at`)."""
        self.early: Callable[[list[nn.Module]], list[Any]] | None = None
        """``gradoc run``: the forwards new roots made before they were found (``auto``)."""
        # this step's forwards (the step protocol resets them when the step ends)
        self.forward_seen = False
        self.samples = 0

    def roots(self, given: list[nn.Module], several: bool = False) -> list[nn.Module]:
        """Name the new roots' modules and watch their forwards; the new roots (``several``:
        other models will follow, each root is named by its prefix)."""
        # a compiled model's forward is seen where the user calls it (its wrapper runs
        # eagerly, the inside not)
        callee = IdMap((unwrap(r), r if compiled(r) else unwrap(r)) for r in given)
        new_roots = [r for r in callee if r not in self.prefixes]
        assign_prefixes(self.prefixes, new_roots, several)
        for root in new_roots:
            for name, m in objects.named_modules(root):
                self.names.setdefault(m, qualified(self.prefixes[root], name))
        if any(compiled(r) for r in callee.values()):
            self.run.set_meta(compiled=True)  # its inner modules' outputs are not watched
        # NOTE: a deepcopy of the model (an EMA or target network) is not the watched model
        self._roots.update((id(callee[r]), callee[r]) for r in new_roots)
        for root in new_roots:
            handles = local_hooks(callee[root], self._module_pre, self._module_post)
            if handles is None and not self._global:  # the root has hooks of its own
                handles = self._global = global_hooks(self._module_pre, self._module_post)
            self.handles += handles or []
        if self.early is not None and new_roots:
            self.adopt(self.early([callee[r] for r in new_roots]))
        return new_roots

    def module_rows(self, roots: list[nn.Module]) -> list[tuple[object, ...]]:
        """Watch the outputs of the roots' modules; their layer rows (ids after the
        parameters', as they always were)."""
        modules, rows = module_rows(roots, self.prefixes, self.next_id, self.run.config.modules)
        self.next_id += len(rows)
        self.modules.update(modules)
        self.run.steps.activations.adopt(modules)  # what they output before: the first step's
        return rows

    def watch_modules(self, roots: list[nn.Module]) -> None:
        rows = self.module_rows(roots)
        self.run.put(lambda conn: insert_rows(conn, "layers", rows))

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def _module_pre(self, module: nn.Module, args: Any) -> None:
        """Forward pre-hook (a global one: every module of the process calls it, so it
        returns at once unless ``module`` is a watched root)."""
        if traced():
            return
        if id(module) in self._roots and self._roots[id(module)] is module:
            self._root_called(module, args)

    def _module_post(self, module: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        if traced():
            return
        if id(module) in self._roots and self._roots[id(module)] is module:
            self._root_returned(module, kwargs, output)

    def _drew(self, before: RngState) -> None:
        """Whether the forward that began at ``before`` drew random numbers (see
        ``RNG_LOOKS``): the RNG state stops being kept when none of the first forwards did."""
        self._rng_looks += 1
        if not same_rng(before, rng_state()):
            self._rng_looks = RNG_LOOKS  # it draws: the state before each forward is kept
        elif self._rng_looks == RNG_LOOKS:
            self.keep_rng = False

    @guarded
    def adopt(self, calls: list[tuple[nn.Module, Any, Any, Any, RngState]]) -> None:
        """Forwards of a root made before it was watched (``gradoc run`` finds its model at
        the first optimizer step): the step's probes hear of them as if they had been seen
        (a loss they returned was backpropagated by now: it is not the step's to check)."""
        for module, args, kwargs, output, rng in calls:
            self.forward_seen = True
            self.last_forward = (module, args, kwargs)
            self.samples += batch_size(args, kwargs)
            for on_forward in self.points.on_forward:
                on_forward(module, args, kwargs, output, rng if self.keep_rng else {})

    @guarded
    def _root_called(self, module: nn.Module, args: Any) -> None:
        if torch.is_grad_enabled():
            self.forward_seen = True
            if self.forward_at is None:
                self.forward_at = _called_at(module)
                self.run.set_meta(forward_at=self.forward_at)
            rng = rng_state() if self.keep_rng else {}
            self._calls.setdefault(id(module), []).append((args, rng))

    @guarded
    def _root_returned(self, module: nn.Module, kwargs: Any, output: Any) -> None:
        calls = self._calls.get(id(module))
        if not calls:  # called with grad disabled, or a forward that began before attach
            return
        args, rng = calls.pop()
        if rng and self._rng_looks < RNG_LOOKS:
            self._drew(rng)
        self.last_forward = (module, args, kwargs)
        self.samples += batch_size(args, kwargs)
        for on_forward in self.points.on_forward:
            on_forward(module, args, kwargs, output, rng)
        self.run.steps.on_forward_output(output)


def _called_at(module: nn.Module) -> JsonObject:
    """The user's line that calls a watched root (``meta['forward_at']``: where ``gradoc fix``
    puts ``model.train()`` before it, or gives the call a mask), and the variable holding the
    model there (``model``, through its DDP or compile wrapper too; None when the line calls
    it through an expression); read once, from the caller's frame. ``{}`` when no user frame
    calls it (a library's loop)."""
    inner = unwrap(module)
    at = user_line_holding("model", lambda v: isinstance(v, nn.Module) and unwrap(v) is inner)
    return at if at is not None else {}
