"""The watched run: hooks on a model and its optimizer, one host transfer per step.

Step ``k`` is the work between optimizer step ``k-1`` and optimizer step ``k``:

1. forward: on activation steps one global forward hook summarises each watched module's
   output on its device (it exists only on those steps); the watched roots' own hooks
   (kept out of the model's pickles and copies, see ``_hooks``) record each forward's
   inputs for locating;
2. ``backward()``: the loss is captured by the backward tap (a detached scalar);
3. optimizer step pre-hook: gradient norms (foreach reductions) and, on parameter
   steps, gradient max-abs and a copy of the weights;
4. optimizer step post-hook: weight and update norms; then everything the step produced,
   plus the losses of steps not collected since, is added to the run's packet (see
   ``packet``). The packet is read once per step: at the next step's statistics point
   (3.), where the loss and norm must be known before the update is applied, or right
   after the step when nothing is decided there; the writer thread turns it into rows.

Non-finite counts are computed only for gradients whose norm came back non-finite, so
only an already-broken step pays for a second (small) host read.

An optimizer step given a closure (LBFGS) has its statistics read after the closure's
first call, inside the step. A program with no optimizer has its steps counted at its
``backward()`` / ``torch.autograd.grad`` calls (see ``manual``): the pre-step work runs
when the call returns, the post-step work at the next call.
"""

from __future__ import annotations

import array
import atexit
import contextlib
import functools
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor
from torch.nn.modules.module import register_module_forward_hook
from torch.optim import Optimizer
from torch.utils.hooks import RemovableHandle

from .._state import RngState, rng_state
from .._text import module_label, one_line, safe
from .._version import __version__
from .._wrappers import compiled, compiling, unwrap
from ..config import GuardConfig, WatchConfig
from ..detect._util import update_ratio
from ..guard import Guard, GuardGaveUp, Vitals, agree, scale_lr
from ..guard import lr as guard_lr
from ..locate import Origin
from ..locate.replay import own_work, rerun_closure
from ..stats import (
    activation_stats,
    combine,
    max_abs,
    nonfinite_counts,
    norms,
    unit_dim,
    update_stats,
)
from ..stats.precision import (
    EXP_MIN,
    RANGE_FIELDS,
    exponent_histogram,
    merge_counts,
    range_counts,
)
from ..store.writer import RunWriter, insert_rows, real
from . import taps
from ._hooks import global_hooks, local_hooks
from .functional import PRE_ACTIVATION_SATURATION, functional_activations
from .layers import (
    WatchedModule,
    WatchedParam,
    assign_prefixes,
    module_rows,
    owner_names,
    param_row,
    param_rows,
    qualified,
)
from .lengths import LengthMonitor, batch_lengths, batch_size
from .lengths import stats as length_stats
from .locating import Locator, first_tensor
from .manual import HandWritten, fallback_name, step_leaves, variable_names
from .packet import Packet

Finish = Callable[
    [Path, "str | Path | None", "dict[str, Any] | None", dict[str, str]], "dict[str, Any]"
]
"""What writes a closed run's report and sinks (see ``Run(finish=...)``)."""


@dataclass(slots=True)
class _Target:
    """One watched optimizer and its parameters."""

    optimizer: Optimizer
    params: list[WatchedParam]
    steps: int = 0
    """Steps this optimizer has taken; its statistics are recorded under this count."""
    # per-step scratch, set in the pre-hook and consumed in the post-hook
    present: list[WatchedParam] = field(default_factory=list)
    collected_at: int = 0
    grad_norms: Tensor | None = None
    grad_maxabs: Tensor | None = None
    before: list[Tensor] | None = None
    updates: Tensor | None = None
    held: dict[int, Tensor] = field(default_factory=dict)
    """Gradients of a skipped (non-finite) update, kept until they are counted."""
    manual: bool = False
    """Hand-written updates (no optimizer): nothing is ever skipped or clipped."""
    given: dict[int, Tensor] = field(default_factory=dict)
    """Gradients ``torch.autograd.grad`` returned (they are in no ``.grad``)."""
    counted: dict[int, float] | None = None
    """Non-finite values per gradient, when counted at the step's statistics point."""

    def grad(self, w: WatchedParam) -> Tensor | None:
        """The gradient this step uses for ``w``."""
        g = self.given.get(w.id)
        if g is None:
            g = self.held.get(w.id)
        return g if g is not None else w.param.grad

    def collected(self) -> bool:
        return self.grad_norms is not None or self.updates is not None

    def reset(self) -> None:
        self.grad_norms = self.grad_maxabs = self.updates = None
        self.held, self.counted = {}, None


@dataclass(slots=True)
class _Slices:
    """Where one target's statistics lie in the transferred vector."""

    step: int
    primary: bool
    present: list[WatchedParam]
    held: dict[int, Tensor]
    counted: dict[int, float] | None
    norms: slice | None
    maxabs: slice | None
    updates: slice | None


@dataclass(slots=True)
class _Layout:
    """Where one transfer's statistics lie in the packet's host vector."""

    step: int
    """The step in progress at the transfer (its activations are this step's)."""
    rows: list[tuple[_StepRow, slice | None]]
    lrs: dict[tuple[int, int], slice]
    targets: list[_Slices]
    acts: dict[int, list[tuple[int, slice, slice | None]]]


@dataclass(slots=True)
class _StepRow:
    step: int
    time: float
    n_backward: int
    samples: int | None
    """Samples the watched model saw in the step (batch sizes; 1 per unbatched call)."""
    lrs: list[float | Tensor]
    """A learning rate may be a tensor (capturable optimizers): it then travels in the pack."""
    loss: Tensor | None


def _sharded(t: Tensor) -> bool:
    """A DTensor (FSDP2's ``fully_shard`` parameters and gradients)."""
    return type(t).__name__ == "DTensor" and hasattr(t, "full_tensor")


def full_norms(grads: list[Tensor]) -> Tensor:
    """Per-tensor L2 norms of sharded gradients, of the whole (unsharded) tensors: the
    foreach norm of DTensors is a DTensor; ``full_tensor()`` completes it across ranks."""
    return torch.stack([n.full_tensor() for n in torch._foreach_norm(grads)]).float()  # type: ignore[attr-defined]


def _lr(group: dict[str, Any]) -> float | Tensor:
    lr = group.get("lr", math.nan)
    return lr.detach() if isinstance(lr, Tensor) else float(lr)


def _guarded(method: Callable[..., None]) -> Callable[..., None]:
    """A hook that fails stops gradoc, never the user's training (and says so once)."""

    @functools.wraps(method)
    def hook(self: Run, *args: Any, **kwargs: Any) -> None:
        if self._broken or self._locator.replaying:
            return
        try:
            with own_work():
                method(self, *args, **kwargs)
        except GuardGaveUp:
            raise  # the guard's decision to stop training, not a failure of gradoc
        except Exception as exc:
            self._broken = True
            message = f"internal error in {method.__name__}: {type(exc).__name__}: {exc}"
            print(f"gradoc: {safe(message)}; monitoring stopped, training goes on", file=sys.stderr)
            with contextlib.suppress(Exception):
                self.event("internal_error", message)

    return hook


class Run:
    """A watched training run writing its log to ``dir/run.db``.

    Made by :func:`gradoc.watch` (or ``gradoc run``); use it as a context manager or call
    :meth:`close` so the log is complete and ``report.json`` is written.
    """

    def __init__(
        self,
        directory: Path,
        config: WatchConfig,
        *,
        script: str | None = None,
        lr_scale: float = 1.0,
        finish: Finish | None = None,
    ) -> None:
        """``lr_scale``: multiply every optimizer's learning rates (schedules included) when
        it is attached: ``gradoc run --lr-scale`` and ``--fix`` try a rate without an edit.
        ``finish(dir, json_path, stopped, sinks)``: called with the complete log at
        :meth:`close`, it writes what the run leaves (the report, the sinks) and returns the
        report (``gradoc._finish.write_outputs``); without one only the log is written."""
        self._finish = finish
        self.dir = Path(os.path.abspath(directory))  # fixed now: the script may chdir
        self.config = config
        self.step = 0
        """The current step: optimizer steps completed so far."""
        self.closed = False
        self._broken = False
        self._t0 = time.monotonic()
        self._writer = RunWriter(
            self.dir / "run.db",
            flush_every_s=config.flush_every_s,
            flush_every_steps=config.flush_every_steps,
            queue_size=config.queue_size,
            keep_recent_steps=config.keep_recent_steps,
            keep_old_steps=config.keep_old_steps,
        )
        self._writer.set_meta(
            gradoc=__version__,
            torch=torch.__version__,
            python=sys.version.split()[0],
            script=script or (sys.argv[0] if sys.argv and sys.argv[0] else None),
            argv=list(sys.argv),
            started_at=time.time(),
            status="running",
            config=config.describe(),
            lr_scale=lr_scale,
        )
        self._targets: dict[Optimizer, _Target] = {}
        self._primary: Optimizer | None = None
        self._prefixes: dict[nn.Module, str] = {}  # watched root modules -> name prefix
        self._modules: dict[nn.Module, WatchedModule] = {}
        self._next_id = 0
        self._handles: list[RemovableHandle] = []
        self._act_handles: list[RemovableHandle] = []
        self._roots: dict[int, nn.Module] = {}  # id -> watched root (the hooks' filter)
        self._global_hooks: list[RemovableHandle] = []
        self._calls: dict[int, list[tuple[tuple[Any, ...], RngState]]] = {}
        """Per watched root, its forward calls in progress: (args, RNG state before)."""
        self._scratch: dict[torch.dtype, Tensor] = {}
        self._device: torch.device | None = None
        self._losses: list[Tensor] = []
        self._n_backward = 0
        self._samples = 0
        self._loss_fn_seen = False
        self._produced: dict[Any, WatchedModule] = {}  # output node -> module, one step
        self._functional: dict[str, str] | None = None  # module -> F.relu/tanh after it
        self._forward_seen = False
        self._pending: list[_StepRow] = []
        self._packet = Packet()
        """The device tensors waiting for the step's one host read (see ``packet``)."""
        self._acts: dict[int, list[tuple[int, Tensor, Tensor | None]]] = {}
        self._last_transfer = time.monotonic()
        self._seen_nonfinite: set[str] = set()
        self._names: dict[nn.Module, str] = {}
        self._locator = Locator(self._names)
        self._update_ratios: dict[str, tuple[int, float]] = {}
        self._origins: dict[int, dict[str, Any]] = {}  # step -> where its NaN was born
        # check_amp: device-side sums over the sampled steps, read once at close
        self._amp_acts: dict[int, Tensor] = {}
        self._amp_grads: dict[int, tuple[Tensor, Tensor]] = {}
        self._amp_steps = [0, 0]  # activation steps, gradient steps sampled
        # this step's batch lengths: (on the device, or None when the width says it), n, width
        self._lengths: tuple[Tensor | None, int, int | None] | None = None
        self._length_monitor = LengthMonitor()
        self._last_forward: tuple[nn.Module, Any, Any] | None = None
        self._audited: set[tuple[str, str | None]] = set()
        self._guard: Guard | None = None
        self._counting: list[str] = []
        # steps without an optimizer (see ``manual``): the stand-in target, whether its
        # step's statistics were read and the step not ended yet, the next step's tensors
        self._manual: _Target | None = None
        self._manual_open = False
        self._manual_leaves: list[Tensor] | None = None
        self._manual_names: dict[int, str] = {}
        self._manual_stable = 0
        self._grads_before: dict[int, int] = {}
        self._probe: list[Tensor] = []
        self.find_owners: Callable[[set[int]], list[nn.Module]] | None = None
        """Set by ``gradoc run``: the modules that ran and own some of these tensors."""
        # optimizer steps that take a closure (LBFGS): statistics after its first call
        self._closure_open = False
        self._rerun: tuple[Callable[[], Any], RngState] | None = None
        self.step_listeners: list[Callable[[str, int], None]] = []
        """Called with ("stats", step) once a step's statistics are read and with ("end",
        step) once it ended (``gradoc._replay`` arms its trace from them)."""
        self._lr_scale = lr_scale
        if lr_scale != 1.0:
            guard_lr.install()  # before the script makes its schedulers: scale_lr finds them
        guard = config.guard_config()  # skipping non-finite steps is the guard's, always
        if guard is not None:  # every_step: asked for, not the default that only skips
            asked = isinstance(config.guard, GuardConfig)
            self._guard = Guard(guard, self.event, every_step=asked)
        taps.add_loss_sink(self)
        _open_runs.add(self)

    # -- attaching ----------------------------------------------------------------------
    def attach(
        self,
        models: nn.Module | list[nn.Module],
        optimizer: Optimizer | None,
        *,
        hooks: bool = True,
    ) -> None:
        """Watch ``optimizer`` and the ``models`` owning its parameters; with no optimizer,
        watch the models of a program that updates its tensors itself (steps are then its
        ``backward()`` calls, see ``manual``).

        With ``hooks=False`` the caller routes optimizer steps to :meth:`pre_step` and
        :meth:`post_step` itself (``gradoc run`` does, through global optimizer hooks).
        """
        if self.closed:
            raise RuntimeError("this gradoc run is closed")
        if optimizer in self._targets:
            return
        new_roots = self._watch_roots([models] if isinstance(models, nn.Module) else list(models))
        if optimizer is None:
            self._watch_modules(new_roots)
            return
        taps.note_optimizer(optimizer)
        if self._manual is not None:  # steps were counted at backward() until an optimizer
            # stepped after all: from now on it counts them
            self._targets.pop(self._manual.optimizer, None)
            self._primary = None if self._primary is self._manual.optimizer else self._primary
            self._manual, self._manual_open = None, False
            self.event("steps_counted", "an optimizer stepped: steps counted at its step()")
        params, rows = param_rows(self._prefixes, optimizer, len(self._targets), self._next_id)
        self._next_id += len(rows)
        mrows = self._module_rows(new_roots)
        self._targets[optimizer] = _Target(optimizer, params)
        self._counted_by("optimizer.step()")
        if self._guard is not None:
            self._guard.watch(optimizer)
        if self._lr_scale != 1.0:
            scale_lr(optimizer, self._lr_scale)
            self.event("lr_scaled", f"learning rates x{self._lr_scale:g} (applied by gradoc)")
        if self._primary is None:
            self._primary = optimizer
            self._arm_activations(self.config.activations(self.step))
        if self._device is None and params:
            self._device = params[0].param.device
        all_rows = rows + mrows
        self._writer.put(lambda conn: insert_rows(conn, "layers", all_rows))
        if hooks:
            self._handles.append(
                optimizer.register_step_pre_hook(lambda o, a, k: self.before_step(o, a, k))
            )
            self._handles.append(
                optimizer.register_step_post_hook(lambda o, a, k: self.post_step(o))
            )

    def _watch_roots(self, given: list[nn.Module]) -> list[nn.Module]:
        """Name the new roots' modules and watch their forwards; the new roots."""
        # DDP/DataParallel/torch.compile: watch the module inside, so layer names have no
        # "module." or "_orig_mod." and a replay runs eagerly on one rank; a compiled model's
        # forward is seen where the user calls it (its wrapper runs eagerly, the inside not)
        callee = {unwrap(r): (r if compiled(r) else unwrap(r)) for r in given}
        new_roots = [r for r in callee if r not in self._prefixes]
        assign_prefixes(self._prefixes, new_roots)
        for root in new_roots:
            for name, m in root.named_modules():
                self._names.setdefault(m, qualified(self._prefixes[root], name))
        if any(compiled(r) for r in callee.values()):
            self.set_meta(compiled=True)  # its inner modules' outputs are not watched
        # NOTE: hooks that stay out of the model's pickles and copies (see _hooks); a deepcopy
        # of the model (an EMA or target network) is not the watched model
        self._roots.update((id(callee[r]), callee[r]) for r in new_roots)
        for root in new_roots:
            handles = local_hooks(callee[root], self._module_pre, self._module_post)
            if handles is None and not self._global_hooks:  # the root has hooks of its own
                handles = self._global_hooks = global_hooks(self._module_pre, self._module_post)
            self._handles += handles or []
        return new_roots

    def _module_rows(self, roots: list[nn.Module]) -> list[tuple[object, ...]]:
        """Watch the outputs of the roots' modules; their layer rows (ids after the
        parameters', as they always were)."""
        modules, rows = module_rows(roots, self._prefixes, self._next_id, self.config.modules)
        self._next_id += len(rows)
        self._modules.update(modules)
        return rows

    def _watch_modules(self, roots: list[nn.Module]) -> None:
        rows = self._module_rows(roots)
        self._writer.put(lambda conn: insert_rows(conn, "layers", rows))

    def _counted_by(self, how: str) -> None:
        """Say once in the log how steps are counted (the report shows it)."""
        if how not in self._counting:
            self._counting.append(how)
            self.set_meta(steps_counted_by=list(self._counting))

    def _module_pre(self, module: nn.Module, args: Any) -> None:
        """Global forward pre-hook: every module of the process calls it, so it returns at
        once unless ``module`` is a watched root."""
        if compiling():
            return
        if id(module) in self._roots and self._roots[id(module)] is module:
            self._root_called(module, args)

    def _module_post(self, module: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        if compiling():
            return
        if id(module) in self._roots and self._roots[id(module)] is module:
            self._root_returned(module, kwargs, output)

    @_guarded
    def _root_called(self, module: nn.Module, args: Any) -> None:
        if torch.is_grad_enabled():
            self._forward_seen = True
            rng = rng_state() if self.config.locate else {}
            self._calls.setdefault(id(module), []).append((args, rng))

    @_guarded
    def _root_returned(self, module: nn.Module, kwargs: Any, output: Any) -> None:
        calls = self._calls.get(id(module))
        if not calls:  # called with grad disabled, or a forward that began before attach
            return
        args, rng = calls.pop()
        self._last_forward = (module, args, kwargs)
        self._samples += batch_size(args, kwargs)
        lengths, source, padded = batch_lengths(module, args, kwargs)
        self._length_monitor.source = self._length_monitor.source or source
        if lengths is not None:
            self._lengths = (lengths, lengths.numel(), padded)
        elif padded is not None and args:  # every sample as long as the batch is wide
            self._lengths = (None, args[0].shape[0], padded)
        if self.config.locate:
            self._locator.on_forward(module, args, kwargs, rng)
            self._locator.on_output(module, output)

    # -- loss ---------------------------------------------------------------------------
    @_guarded
    def _on_backward(self, tensors: Any, inputs: Any = None, direct: bool = True) -> None:
        if not direct:
            return  # PyTorch's own call (a reentrant checkpoint), not a step of the program
        leaves = self._leaves(tensors, inputs) if self._maybe_manual() else None
        if leaves is not None and self._manual is None:  # decided when the call returns
            self._grads_before = taps.optimizer_grads()
            # what an optimizer may hold: the graph's leaves too, not only the ``inputs``
            # asked for (a gradient penalty's autograd.grad runs through the critic)
            self._probe = leaves if inputs is None else leaves + step_leaves(tensors, None)
            self._manual_leaves = leaves
        elif leaves is not None and self._manual_mode(leaves):
            matched = self._match(leaves)
            if self._manual_open:  # the previous step ends: its update is done by now
                # what this step's forward did is this step's, not the one that ends
                seen, samples = self._forward_seen, self._samples
                self._end_manual(matched)
                self._forward_seen, self._samples = seen, samples
            self._manual_leaves = leaves
        # With several runs open, a run takes only losses computed after its own model ran
        # (a run attached later by `gradoc run` takes everything until it knows its model).
        if self._prefixes and not self._forward_seen:
            return
        self._n_backward += 1
        if self._closure_open:
            return  # a closure called again within its step (LBFGS): the first loss counts
        loss = taps.scalar_loss(tensors)
        if loss is not None:
            self._losses.append(loss)
            if self._produced and self._functional is None:
                self._read_functional(tensors)
            if not self._loss_fn_seen:  # what the loss is says what its chance level is
                self._loss_fn_seen = True
                kind = taps.loss_kind(tensors)
                if kind is not None:
                    self.set_meta(loss_fn=kind)

    def _after_backward(self, tensors: Any, inputs: Any, grads: Any, direct: bool) -> None:
        if not direct:
            return
        leaves, self._manual_leaves = self._manual_leaves, None
        if leaves is not None and self._manual_mode(leaves):
            self._open_manual(leaves, grads)

    # -- steps without an optimizer (see ``manual``) -------------------------------------
    def _maybe_manual(self) -> bool:
        """Steps may be counted at backward(): no optimizer attached (yet)."""
        if self.closed or self._locator.replaying:
            return False
        return self._manual is not None or not self._targets

    def _manual_mode(self, leaves: list[Tensor]) -> bool:
        """No optimizer holds this step's tensors: the program updates them itself."""
        if not self._maybe_manual():
            return False
        if self._manual is not None:
            return len(self._targets) == 1  # until an optimizer is attached after all
        probe, self._probe = self._probe or leaves, []
        return bool(leaves) and not taps.held_by_optimizer(probe, self._grads_before)

    def _leaves(self, tensors: Any, inputs: Any) -> list[Tensor]:
        """This step's tensors. NOTE: the autograd graph is walked until three steps in a
        row gave the same tensors (a model updated in place); from then on they are the
        watched ones, so a step costs no walk of a graph that grows with the model."""
        target = self._manual
        if target is not None and self._manual_stable >= 3 and inputs is None:
            return [w.param for w in target.params]
        leaves = step_leaves(tensors, inputs)
        if inputs is None and self._prefixes:  # the watched models' own, also where the
            # graph hides them (a reentrant checkpoint): those that get a gradient count
            owned = [p for root in self._prefixes for p in root.parameters() if p.requires_grad]
            ids = {id(p) for p in owned}
            leaves = owned + [t for t in leaves if id(t) not in ids]
        if target is not None and inputs is None:
            same = [id(t) for t in leaves] == [id(w.param) for w in target.params]
            self._manual_stable = self._manual_stable + 1 if same else 0
        return leaves

    def _match(self, leaves: list[Tensor]) -> list[tuple[WatchedParam | None, Tensor]]:
        """This step's tensors against the watched ones: the same tensor, else (a program
        that rebinds ``w = w - lr * g`` makes a new one each step) the same name."""
        target = self._manual
        by_id = {id(w.param): w for w in target.params} if target is not None else {}
        by_name = {w.name: w for w in target.params} if target is not None else {}
        unnamed = [t for t in leaves if id(t) not in by_id and id(t) not in self._manual_names]
        if unnamed:
            self._manual_names.update(self._names_of(unnamed))
        out: list[tuple[WatchedParam | None, Tensor]] = []
        for t in leaves:
            w = by_id.get(id(t))
            if w is None:
                old = by_name.get(self._manual_names.get(id(t), ""))
                w = old if old is not None and old.param.shape == t.shape else None
            out.append((w, t))
        # only this step's tensors keep their names: ids of freed tensors are reused
        self._manual_names = {id(t): n for t in leaves if (n := self._manual_names.get(id(t)))}
        return out

    def _names_of(self, tensors: list[Tensor]) -> dict[int, str]:
        """Names for new tensors: the module owning them, else the user's variable."""
        if self.find_owners is not None and not self._prefixes:
            owners = self.find_owners({id(t) for t in tensors})
            if owners:
                self._watch_modules(self._watch_roots(owners))
        names = {i: name for i, (name, _, _) in owner_names(self._prefixes).items()}
        missing = [t for t in tensors if id(t) not in names]
        if missing:
            names |= variable_names(missing)
        return names

    @_guarded
    @torch.no_grad()
    def _open_manual(self, leaves: list[Tensor], grads: Any) -> None:
        """A direct backward()/autograd.grad returned: step ``k``'s statistics point."""
        target = self._manual
        if target is None:
            stand_in: Any = HandWritten()
            target = self._manual = _Target(stand_in, [], manual=True)
            self._targets[stand_in] = target
            self._primary = stand_in
        self._counted_by("torch.autograd.grad()" if grads is not None else "backward()")
        params, rows = [], []
        owners: dict[int, tuple[str, str, str]] | None = None
        taken = {w.name for w in target.params}
        for w, t in self._match(leaves):
            if w is None:  # a tensor seen for the first time
                owners = owners if owners is not None else owner_names(self._prefixes)
                name = self._manual_names.get(id(t)) or fallback_name(self._next_id, t)
                while name in taken:
                    name += "'"
                _, module, mtype = owners.get(id(t), (name, "", None))
                w = WatchedParam(self._next_id, t, name, module, 0)  # type: ignore[arg-type]
                rows.append(param_row(w, mtype, 0))
                self._next_id += 1
                taken.add(name)
            w.param = t  # type: ignore[assignment]
            params.append(w)
        if rows:
            self._writer.put(lambda conn: insert_rows(conn, "layers", rows))
        target.params = params
        target.optimizer.param_groups[0]["params"] = leaves
        if self._device is None and params:
            self._device = params[0].param.device
        target.given = {}
        if grads is not None:  # autograd.grad: the gradients are what it returned
            pairs = zip(params, grads if isinstance(grads, (tuple, list)) else [grads])
            target.given = {w.id: g for w, g in pairs if isinstance(g, Tensor)}
        if not self._act_handles and self.config.activations(self.step):
            self._arm_activations(True)
        self._manual_open = True
        self._pre_step(target)

    def _end_manual(self, matched: list[tuple[WatchedParam | None, Tensor]] | None) -> None:
        """The step ends: the tensors' change since its statistics point is its update."""
        target = self._manual
        self._manual_open = False
        if target is None:
            return
        for w, t in matched or []:
            if w is not None:
                w.param = t  # type: ignore[assignment]  # a rebound tensor's new value
        self.post_step(target.optimizer)
        target.given = {}

    def _read_functional(self, tensors: Any) -> None:
        """Once: which watched modules feed an activation function (see ``functional``)."""
        loss = tensors[0] if isinstance(tensors, (list, tuple)) else tensors
        found = functional_activations(loss, self._produced) if isinstance(loss, Tensor) else []
        self._produced = {}
        self._functional = {w.name: kind for w, kind in found}
        for watched, kind in found:
            if kind in PRE_ACTIVATION_SATURATION and watched.saturation is None:
                watched.saturation = PRE_ACTIVATION_SATURATION[kind]
        if self._functional:
            self.set_meta(functional_activations=self._functional)

    # -- activations --------------------------------------------------------------------
    def _arm_activations(self, on: bool) -> None:
        """One global forward hook, present only on the steps that collect activations."""
        if on and not self._act_handles:
            self._act_handles = [register_module_forward_hook(self._module_output)]
        elif not on and self._act_handles:
            for h in self._act_handles:
                h.remove()
            self._act_handles = []

    def _module_output(self, module: nn.Module, args: Any, output: Any) -> None:
        if compiling():  # a compiled model's modules: not watched inside (see README)
            return
        watched = self._modules.get(module)
        if watched is not None and torch.is_grad_enabled():
            self._on_forward(watched, module, output)

    @_guarded
    def _on_forward(self, watched: WatchedModule, module: nn.Module, output: Any) -> None:
        x = first_tensor(output)
        if x is None or x.numel() == 0 or x.is_complex():
            return
        vec, active = activation_stats(
            x, watched.saturation, unit_dim(module, x), self._scratch_for(x)
        )
        self._acts.setdefault(watched.id, []).append((x.numel(), vec, active))
        if self._functional is None and x.grad_fn is not None:
            self._produced[x.grad_fn] = watched  # read at this step's backward
        if self.config.check_amp and x.is_floating_point():
            self._amp_acts[watched.id] = merge_counts(
                self._amp_acts.get(watched.id), range_counts(x)
            )

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

    # -- optimizer step -----------------------------------------------------------------
    def before_step(
        self,
        optimizer: Optimizer,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        attach: Callable[[], None] | None = None,
    ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """The optimizer step pre-hook (``attach``: attach the optimizer first). A step
        given a closure (LBFGS) computes its gradients inside the step, by calling it: the
        closure is wrapped so that the statistics are read after its first call, when the
        gradients (and, for ``attach``, the modules that own the parameters) exist."""
        # the hooks' ``args`` are the step's: (optimizer, closure?)
        closure = kwargs.get("closure", args[1] if len(args) > 1 else None)
        if not callable(closure) or self.closed:
            if attach is not None:
                attach()
            self.pre_step(optimizer)
            return None
        wrapped = self._wrap_closure(optimizer, closure, attach)
        if "closure" in kwargs:
            return args, {**kwargs, "closure": wrapped}
        return (args[0], wrapped, *args[2:]), kwargs

    def _wrap_closure(
        self, optimizer: Optimizer, closure: Callable[[], Any], attach: Callable[[], None] | None
    ) -> Callable[[], Any]:
        called = [False]

        @functools.wraps(closure)
        def first_call_read() -> Any:
            if called[0] or self.closed:
                return closure()
            called[0] = True
            rng = rng_state()
            result = closure()
            if attach is not None:
                attach()
            self._rerun = (closure, rng)  # a replay of this step calls it again, traced
            try:
                self.pre_step(optimizer)
            finally:
                self._rerun = None
            self._closure_open = True  # its next calls' losses are not the step's
            return result

        return first_call_read

    @_guarded
    @torch.no_grad()  # statistics need no autograd graph
    def pre_step(self, optimizer: Optimizer) -> None:
        target = self._targets.get(optimizer)
        if target is not None:
            self._pre_step(target)

    def _pre_step(self, target: _Target) -> None:
        optimizer = target.optimizer
        self._locator.pause()
        # a guard asked for reads every step's norms (and so records them)
        want_grads = self.config.grads(target.steps) or self._guard_asked()
        want_params = self.config.params(target.steps)
        if want_grads or want_params:
            target.collected_at = target.steps
            target.present = [w for w in target.params if target.grad(w) is not None]
            grads: list[Tensor] = [target.grad(w) for w in target.present]  # type: ignore[misc]
            sharded = bool(grads) and _sharded(grads[0])
            if sharded:  # FSDP2: norms of the full gradients; per-shard statistics skipped
                want_params = False
                self._locator.done = True  # a replay on one rank would wait on the others
            if want_grads:
                target.grad_norms = full_norms(grads) if sharded else norms(grads, self._device)
            if want_params:
                target.grad_maxabs = max_abs(grads, self._device)
                target.before = [w.param.detach().clone() for w in target.present]
                if self.config.check_amp:
                    self._probe_grads(target)
        if self._decides():
            self._vet(target, optimizer is self._primary)
        if self.config.check_padding and optimizer is self._primary:
            step = target.steps
            if step < 3 or step % 200 == 0:
                self._audit_padding(step)
        if target.manual:  # the next forward comes before the next backward: arm now
            self._locator.after_step()
        if optimizer is self._primary:
            for listener in self.step_listeners:
                listener("stats", self.step)

    def _probe_grads(self, target: _Target) -> None:
        """check_amp: accumulate each gradient's range counts and exponent histogram."""
        self._amp_steps[1] += 1
        for w in target.present:
            g = w.param.grad
            if g is None or not g.is_floating_point():
                continue
            counts, hist = range_counts(g), exponent_histogram(g)
            old = self._amp_grads.get(w.id)
            self._amp_grads[w.id] = (
                (merge_counts(old[0], counts), old[1] + hist) if old else (counts, hist)
            )

    def _audit_padding(self, step: int) -> None:
        """--check padding: audit the step's batch; each new finding becomes an event."""
        from ..locate.padding import audit_padding, mask_pads

        if self._last_forward is None:
            return
        root, args, kwargs = self._last_forward
        found = mask_pads(kwargs)
        pads = found[0] if found is not None else None
        first = args[0] if args else None
        if pads is None and isinstance(first, Tensor) and not first.is_floating_point():
            idx = next((e.padding_idx for e in root.modules() if isinstance(e, nn.Embedding)), None)
            if idx is not None:
                pads = first == idx
        if pads is None or not isinstance(first, Tensor) or not bool(pads.any()):
            return
        self._locator.replaying = True  # our hooks stay out of the audit's forwards
        try:
            with torch.enable_grad():
                findings = audit_padding(root, tuple(args), pad_mask=pads, model_kwargs=kwargs)
        finally:
            self._locator.replaying = False
        for f in findings:
            seen = (f.kind, f.layer)
            if seen not in self._audited and f.kind != "padding_waste":
                self._audited.add(seen)
                self.event("padding_audit", f.summary, step=step, finding=f.to_json())

    def _amp_summary(self) -> dict[str, Any]:
        """The check_amp sums, read to the host once: ``meta['amp']``."""
        names = {w.id: w.name for t in self._targets.values() for w in t.params}
        names |= {m.id: m.name for m in self._modules.values()}
        acts = {
            names[i]: dict(zip(RANGE_FIELDS, v.cpu().tolist())) for i, v in self._amp_acts.items()
        }
        grads = {}
        for i, (counts, hist) in self._amp_grads.items():
            h = hist.cpu().tolist()
            grads[names[i]] = {
                **dict(zip(RANGE_FIELDS, counts.cpu().tolist())),
                "exponents": {str(EXP_MIN + k): int(c) for k, c in enumerate(h) if c},
            }
        return {
            "activation_steps": self._amp_steps[0],
            "gradient_steps": self._amp_steps[1],
            "activations": acts,
            "gradients": grads,
        }

    def _locate(self, target: _Target, bad: bool, loss_bad: bool) -> None:
        params, context = [], {}
        if bad:  # what a replay needs, gathered only when there is one to make
            params = [(w.name, w.module, w.param) for t in self._targets.values() for w in t.params]
            lr = _lr(target.optimizer.param_groups[0])
            context = {"learning rate": lr} if isinstance(lr, float) and math.isfinite(lr) else {}
        rerun = None
        if bad and self._rerun is not None:
            closure, rng = self._rerun
            roots = list(self._prefixes)
            rerun = functools.partial(
                rerun_closure, target.steps, closure, rng, roots, self._names, params
            )
        origin = self._locator.step(
            target.steps, bad, loss_bad, params, context, self._update_ratios, rerun
        )
        if origin is not None:
            self.record_origin(origin)

    def record_origin(self, origin: Origin) -> None:
        """Log where a step's NaN/Inf was born (an event the report reads)."""
        self._origins[origin.step] = origin.to_json()
        where = f" in {module_label(origin.module)}" if origin.module is not None else ""
        at = f" ({origin.file}:{origin.line})" if origin.file else ""
        self.event(
            "nonfinite_origin",
            f"{origin.phase}: {origin.op}{where}{at}",
            step=origin.step,
            origin=origin.to_json(),
        )

    def _vitals(self, target: _Target, primary: bool) -> Vitals:
        """This step's loss, finiteness and global gradient norm: the step's one host read,
        which carries the previous step's statistics too."""
        losses = self._losses if primary else []
        norms_ = target.grad_norms
        parts = []
        if losses:
            parts.append(torch.stack(losses).sum())
        lengths = self._lengths if primary else None
        if primary:
            self._lengths = None
        device_lengths = lengths[0] if lengths is not None else None
        if device_lengths is not None:
            parts += list(length_stats(device_lengths))
        if norms_ is not None:
            # a sum is finite exactly when every term is (or overflows, which is as bad)
            parts.append(norms_.sum())
            if self._guard is not None and self._guard.needs_norm:
                wide = torch.float32 if norms_.device.type == "mps" else torch.float64
                parts.append(torch.linalg.vector_norm(norms_.to(wide)))
        if not parts:
            self._observe_lengths(target.steps, lengths, [])
            return Vitals(False, False, None, None)
        at = [self._packet.add(p) for p in parts]
        values = self._packet.read()[at[0].start : at[-1].stop].tolist()
        loss = values.pop(0) / len(losses) if losses else None
        if device_lengths is not None:
            self._observe_lengths(target.steps, lengths, values[:3])
            del values[:3]
        else:
            self._observe_lengths(target.steps, lengths, [])
        grads_bad = not math.isfinite(values[0]) if norms_ is not None else False
        norm = values[1] if len(values) > 1 else None
        if grads_bad:
            grads_bad, global_norm = self._recheck(target)
            norm = global_norm if norm is not None else None
        return Vitals(loss is not None and not math.isfinite(loss), grads_bad, loss, norm)

    def _recheck(self, target: _Target) -> tuple[bool, float]:
        """A non-finite norm: NaN/Inf in a gradient, or finite values so large (> ~1e19)
        that float32 squares overflow. Count the non-finite values and take the norms in
        float64; return (any value non-finite, the global norm in float64). Only a broken
        step pays for this second (small) host read.

        NOTE: mistaking enormous finite gradients for NaN would skip updates the user's
        optimizer makes without gradoc, and hide an explosion behind a "NaN".
        """
        grads = [g for g in map(target.grad, target.present) if g is not None]
        if not grads or _sharded(grads[0]):
            return True, math.inf
        wide = norms(grads, self._device, wide=True)
        counts = nonfinite_counts(grads, self._device)
        read = torch.cat([counts.to(wide), torch.linalg.vector_norm(wide)[None]]).tolist()
        target.grad_norms = wide
        # counted now: a program that updates by hand zeroes its gradients before the
        # step's statistics travel (at the next backward)
        target.counted = {w.id: c for w, c in zip(target.present, read[:-1])}
        return sum(read[:-1]) > 0, read[-1]

    def _observe_lengths(
        self, step: int, lengths: tuple[Tensor | None, int, int | None] | None, read: list[float]
    ) -> None:
        """Feed the batch's lengths to the monitor: min, max, sum from the step's host read,
        or, for token ids without a mask, the batch's width (known on the host)."""
        if lengths is None:
            return
        _, n, padded = lengths
        if read:
            lo, hi, total = int(read[0]), int(read[1]), read[2]
        elif padded is not None:
            lo, hi, total = padded, padded, float(n * padded)
        else:
            return
        anomaly = self._length_monitor.observe(step, lo, hi, total, n, padded)
        if anomaly is not None:
            message = anomaly.pop("message")
            self.event("length_anomaly", message, step=step, **anomaly)

    def _vet(self, target: _Target, primary: bool) -> None:
        """The first non-finite step is located; the guard (or the default skip) acts."""
        v = self._vitals(target, primary)
        if self.config.locate:
            try:
                self._locate(target, v.bad, v.loss_bad)
            except Exception as exc:
                self._locator.done = True
                self.event(
                    "locate_failed", f"could not locate the origin: {type(exc).__name__}: {exc}"
                )
        if target.manual:
            return  # the program applies its own update: gradoc cannot skip it
        if self._guard is not None:
            self._guard_step(self._guard, target, primary, v)

    def _drop_grads(self, target: _Target) -> None:
        """The optimizer skips parameters without a gradient: the update does not happen."""
        for w in target.params:
            if w.param.grad is not None:
                target.held[w.id] = w.param.grad  # counted at the transfer
            w.param.grad = None
        target.before = None  # no update to measure: an update not made is not a tiny one

    def _guard_step(self, guard: Guard, target: _Target, primary: bool, v: Vitals) -> None:
        if guard.collective:
            v = agree(v, self._device)
        step = target.steps
        d = guard.decide(target.optimizer, step, primary, v)
        if d.skip or d.rollback:
            self._drop_grads(target)
            if v.bad:
                reason = d.reason if d.skip else "non-finite"
                guard.skipped_step(target.optimizer, step, reason, self._origins.get(step))
        if d.rollback:
            models, optimizers = list(self._prefixes), list(self._targets)
            guard.rollback(d.to, step, d.reason, models, optimizers)
        elif d.clip_to is not None and v.norm is not None:
            grads = [w.param.grad for w in target.present if w.param.grad is not None]
            guard.clip(grads, v.norm, d.clip_to, step)
        if primary and not (d.skip or d.rollback):
            guard.maybe_snapshot(step, list(self._prefixes), list(self._targets))

    @_guarded
    @torch.no_grad()  # statistics need no autograd graph
    def post_step(self, optimizer: Optimizer) -> None:
        target = self._targets.get(optimizer)
        if target is None:
            return
        if target.before is not None:
            target.updates = update_stats(
                [w.param for w in target.present], target.before, self._device
            )
            target.before = None
        for w in target.params:  # a skipped step's gradients, back where the user left them
            if w.id in target.held and w.param.grad is None:
                w.param.grad = target.held[w.id]
        target.steps += 1
        if self._guard is not None:
            self._guard.stepped(optimizer)
        if optimizer is not self._primary:
            return
        loss = torch.stack(self._losses).float().mean() if self._losses else None
        lrs = [] if target.manual else [_lr(g) for g in optimizer.param_groups]
        self._pending.append(
            _StepRow(
                self.step,
                time.monotonic() - self._t0,
                self._n_backward,
                self._samples or None,
                lrs,
                loss,
            )
        )
        self._losses, self._n_backward, self._forward_seen = [], 0, False
        self._samples, self._closure_open = 0, False
        waiting = len(self._packet) > 0  # a step's statistics not read yet
        if (
            self._collected()
            or len(self._pending) >= self.config.flush_every_steps
            or time.monotonic() - self._last_transfer >= self.config.flush_every_s
        ):
            self._transfer()
        if waiting or not self._decides():
            # read now: nothing before the next update needs the host (or a step read
            # nothing at its statistics point, so two steps' statistics wait)
            self._packet.read()
        if self.config.check_amp and self._act_handles:
            self._amp_steps[0] += 1  # this step's outputs were probed
        self.step += 1
        self._arm_activations(self.config.activations(self.step))
        if not target.manual:
            self._locator.after_step()
        for listener in self.step_listeners:
            listener("end", self.step - 1)

    def _transfer(self) -> None:
        """Add this step's statistics and pending losses to the packet; the step's rows are
        made when it is read (at the next step's statistics point, or now, see post_step)."""
        pack = self._packet
        rows = [(r, pack.add(r.loss) if r.loss is not None else None) for r in self._pending]
        lrs = {
            (k, i): pack.add(lr)
            for k, r in enumerate(self._pending)
            for i, lr in enumerate(r.lrs)
            if isinstance(lr, Tensor)
        }
        targets = [
            _Slices(
                t.collected_at,
                t.optimizer is self._primary,
                list(t.present),
                {**t.given, **t.held},
                t.counted,
                *(
                    pack.add(v) if v is not None else None
                    for v in (t.grad_norms, t.grad_maxabs, t.updates)
                ),
            )
            for t in self._targets.values()
            if t.collected()
        ]
        acts = {
            lid: [(n, pack.add(v), pack.add(a) if a is not None else None) for n, v, a in calls]
            for lid, calls in self._acts.items()
        }
        layout = _Layout(self.step, rows, lrs, targets, acts)
        self._pending, self._acts = [], {}
        for t in self._targets.values():
            t.reset()
        self._last_transfer = time.monotonic()
        pack.on_read(lambda host: self._received(host, layout))

    def _received(self, host: Tensor, layout: _Layout) -> None:
        """A step's statistics reached the host: hand them to the writer thread."""
        counts: dict[int, float] = {}
        for sl in layout.targets:
            if sl.counted is not None:  # counted and measured in float64 at the step
                counts.update({k: v for k, v in sl.counted.items() if v})
            elif sl.norms is not None:
                # A gradient holding NaN/Inf has a non-finite norm; only those are counted.
                # NOTE: read right after the step when nothing is decided before updates
                # (see post_step): the grads are still there (zero_grad comes later), so the
                # counts describe exactly the gradients this step used.
                norms_ = host[sl.norms].tolist()
                bad, grads = [], []
                for i, v in enumerate(norms_):
                    w = sl.present[i]
                    g = sl.held.get(w.id, w.param.grad)
                    if not math.isfinite(v) and g is not None:
                        bad.append(i)
                        grads.append(g)
                if grads and not _sharded(grads[0]):
                    # counted, and measured again in float64: a norm can overflow float32
                    # while every value is finite (enormous gradients, not NaN)
                    found = torch.cat([nonfinite_counts(grads), norms(grads, wide=True)])
                    values = found.tolist()
                    n = len(grads)
                    for k, i in enumerate(bad):
                        counts[sl.present[i].id] = values[k]
                        if values[k] == 0:
                            host[sl.norms.start + i] = values[n + k]
            if sl.updates is not None and self.config.locate:
                self._note_update_ratios(sl, host[sl.updates].tolist())
        self._writer.put(_StepRecord(self, host, layout, counts))

    def _note_update_ratios(self, sl: _Slices, values: list[float]) -> None:
        """Keep the update/weight ratio of weight matrices an update made huge (host values we
        have anyway): such an update is the cause of the overflow that follows it."""
        n = len(sl.present)
        for i, w in enumerate(sl.present):
            weight, update = values[i], values[n + i]  # weight: before the update
            # NOTE: only updates that made the weights huge count (update RMS > 100; healthy
            # weights ~0.01-1), so a zero-initialised matrix's first update does not
            rms = update / math.sqrt(max(1, w.param.numel()))
            ratio = update_ratio(update, weight)
            if w.param.dim() >= 2 and rms > 100 and ratio is not None:
                self._update_ratios[w.name] = (sl.step, ratio)

    def _guard_asked(self) -> bool:
        """The run was given a guard (not only the default that skips)."""
        return self._guard is not None and self._guard.every_step

    def _decides(self) -> bool:
        """Something is decided at every statistics point (skip, clip, locate), so the step's
        one host read is made there, carrying the previous step's statistics."""
        return self.config.locate or self._guard is not None

    def _collected(self) -> bool:
        return bool(self._acts) or any(t.collected() for t in self._targets.values())

    def _unsent(self) -> bool:
        return bool(self._pending) or self._collected() or len(self._packet) > 0

    def _send(self) -> None:
        """Everything collected so far, to the writer thread (one host read)."""
        if self._pending or self._collected():
            self._transfer()
        self._packet.read()

    # -- closing ------------------------------------------------------------------------
    def flush(self) -> None:
        """Write everything collected so far to the run log (waits for the writer)."""
        if not self.closed:
            if self._unsent():
                self._send()
            self._writer.flush()

    def begin_step(self) -> None:
        """Mark the start of a step whose forward pass does not go through the watched
        model's ``forward()`` (Lightning's ``training_step``): its loss belongs to this run."""
        self._forward_seen = True

    def guard_summary(self) -> dict[str, Any] | None:
        """What the guard has done so far (skipped, clipped, rollbacks, ...); None without one."""
        guard = self._guard
        return guard.summary() if guard is not None and guard.every_step else None

    @property
    def locator(self) -> Locator:
        """Where the run's non-finite origins are found (``gradoc run`` arms it)."""
        return self._locator

    @property
    def module_names(self) -> dict[nn.Module, str]:
        """Every watched module's name in the run's layer names."""
        return self._names

    @property
    def counts_backward(self) -> bool:
        """Steps are counted at ``backward()`` calls (a program without an optimizer)."""
        return self._manual is not None

    def watches(self, optimizer: Optimizer) -> bool:
        """The optimizer is attached to this run."""
        return optimizer in self._targets

    @property
    def guard(self) -> Guard | None:
        """The run's guard (``state_dict()`` / ``load_state_dict()`` carry it across a
        resumed job); None when non-finite steps are not skipped."""
        return self._guard

    def set_meta(self, **items: Any) -> None:
        """Record facts about the run (JSON values) in the run log's ``meta`` table."""
        self._writer.set_meta(**items)

    def event(self, kind: str, message: str, step: int | None = None, **data: Any) -> None:
        """Record an event in the run log (shown in reports)."""
        t = time.monotonic() - self._t0
        row = (
            None,
            self.step if step is None else step,
            t,
            kind,
            message,
            json.dumps(data, default=str),
        )
        self._writer.put(lambda conn: insert_rows(conn, "events", [row]))

    def close(
        self,
        status: str = "finished",
        exit_code: int | None = None,
        json_path: str | Path | None = None,
    ) -> dict[str, Any] | None:
        """Stop watching, complete the run log and write ``report.json`` (and ``json_path``).

        Returns the report; a second call does nothing and returns None.
        """
        if self.closed:
            return None
        with _sigint_deferred() as interrupted:  # a second Ctrl-C must not cost the log
            self._complete_log(status, exit_code)
        if interrupted:
            print(
                f"gradoc: interrupted; the run log is complete ({one_line(self.dir)}), the "
                "report was not written: gradoc report DIR writes it",
                file=sys.stderr,
            )
            raise KeyboardInterrupt
        if self._finish is None:
            return None
        stopped = None
        if self._writer.error is not None:  # the log lacks the end of the run: say so
            error = one_line(self._writer.error)
            stopped = {"error": error, "steps": self.step, "status": status}
            stopped["exit_code"] = exit_code
        try:
            report = self._finish(self.dir, json_path, stopped, dict(self.config.sinks))
        except KeyboardInterrupt:
            print(
                f"gradoc: interrupted while writing the report; the run log is complete: "
                f"gradoc report {one_line(self.dir)}",
                file=sys.stderr,
            )
            raise
        except Exception as exc:  # the user's program goes on (and keeps its exit code)
            if os.environ.get("GRADOC_DEBUG"):
                raise
            print(
                f"gradoc: could not write the report ({type(exc).__name__}: {one_line(exc)}); "
                f"the run log is at {one_line(self.dir)}",
                file=sys.stderr,
            )
            return None
        return report

    def _complete_log(self, status: str, exit_code: int | None) -> None:
        """Unhook, locate what is still unlocated, flush and close the run log."""
        if self._manual_open:  # the last step of a program without an optimizer ends here
            self._end_manual(None)
        self._arm_activations(False)
        if self.config.locate and not self._broken:
            try:
                origin = self._locator.close(self.step)
                if origin is not None:
                    self.record_origin(origin)
            except Exception as exc:  # the report matters more than the origin
                self.event("locate_failed", f"could not locate the origin: {exc}")
        for h in self._handles:
            h.remove()
        self._handles.clear()
        taps.remove_loss_sink(self)
        if self._guard is not None:
            self._guard.close()
        if self._lr_scale != 1.0:
            guard_lr.uninstall()
        if self._unsent() and not self._broken:
            try:
                self._send()
            except Exception as exc:  # the log so far is still written and reported
                print(f"gradoc: could not record the last step: {safe(exc)}", file=sys.stderr)
        self._writer.set_meta(
            status=status,
            exit_code=exit_code,
            ended_at=time.time(),
            duration_s=round(time.monotonic() - self._t0, 3),
            steps=self.step,
            skipped_updates=self._guard.skipped if self._guard is not None else 0,
            # without an optimizer a step ends at the next backward(): one may be under way
            ended_mid_step=self._forward_seen or self._manual is not None,
            guard=self.guard_summary(),
        )
        if self.config.check_amp and not self._broken:
            self._writer.set_meta(amp=self._amp_summary())
        if self._length_monitor.batches:
            self._writer.set_meta(lengths=self._length_monitor.summary())
        self.closed = True
        self._writer.close()
        _open_runs.discard(self)

    def __enter__(self) -> Run:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None:
            self.close()
            return
        if isinstance(exc, GuardGaveUp):  # its own event says why
            self.close("gave_up")
            return
        interrupted = isinstance(exc, KeyboardInterrupt)
        self.event("interrupted" if interrupted else "crash", f"{type(exc).__name__}: {exc}")
        self.close("interrupted" if interrupted else "crashed")

    def __repr__(self) -> str:
        return f"<gradoc.Run {str(self.dir)!r} step={self.step}{' closed' if self.closed else ''}>"


class _StepRecord:
    """Turns one transfer into rows; runs on the writer thread."""

    def __init__(self, run: Run, host: Tensor, layout: _Layout, counts: dict[int, float]) -> None:
        self.run, self.host, self.counts = run, host, counts
        self.step, self.rows, self.lrs = layout.step, layout.rows, layout.lrs
        self.targets, self.acts = layout.targets, layout.acts

    def __call__(self, conn: Any) -> int:
        values = self.host.tolist()
        step = self.step  # activations belong to the step in progress at the transfer
        param_rows = []
        # the steps table's global norm and non-finite count are the first optimizer's
        sumsq, nonfinite, primary_step = 0.0, 0, None
        for sl in self.targets:
            n = len(sl.present)
            gv = values[sl.norms] if sl.norms is not None else [None] * n
            mv = values[sl.maxabs] if sl.maxabs is not None else [None] * n
            uv = values[sl.updates] if sl.updates is not None else [None] * 2 * n
            if sl.primary and sl.norms is not None:
                primary_step = sl.step
            for i, w in enumerate(sl.present):
                norm = gv[i]
                # counts were taken only where the norm was non-finite; elsewhere they are 0
                bad = None if norm is None else int(self.counts.get(w.id, 0))
                param_rows.append(
                    (sl.step, w.id, real(norm), real(mv[i]), bad, real(uv[i]), real(uv[n + i]))
                )
                if sl.primary and norm is not None:
                    sumsq += norm * norm
                    nonfinite += bad or 0
        act_rows = []
        for lid, calls in self.acts.items():
            s = combine(
                [(n, values[v]) for n, v, _ in calls],
                [values[a] if a is not None else None for _, _, a in calls],
            )
            blob = array.array("f", s.unit_active).tobytes() if s.unit_active is not None else None
            act_rows.append(
                (
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
            )
        step_rows = []
        for k, (r, loss_at) in enumerate(self.rows):
            loss = values[loss_at][0] if loss_at is not None else None
            lrs = [
                values[self.lrs[(k, i)]][0] if (k, i) in self.lrs else lr
                for i, lr in enumerate(r.lrs)
            ]
            current = r.step == primary_step
            step_rows.append(
                (
                    r.step,
                    r.time,
                    real(loss),
                    r.n_backward,
                    real(math.sqrt(sumsq)) if current else None,
                    nonfinite if current else None,
                    json.dumps(lrs),
                    r.samples,
                )
            )
            if loss is not None and not math.isfinite(loss):
                self._first(conn, "nonfinite_loss", r.step, f"loss is {loss} at step {r.step}")
        bad_steps = [
            sl.step for sl in self.targets if any(self.counts.get(w.id) for w in sl.present)
        ]
        if bad_steps:
            total = int(sum(self.counts.values()))
            self._first(
                conn,
                "nonfinite_grad",
                min(bad_steps),
                f"{total} non-finite gradient values at step {min(bad_steps)}",
            )
        insert_rows(conn, "steps", step_rows)
        insert_rows(conn, "param_stats", param_rows)
        insert_rows(conn, "act_stats", act_rows)
        return max([step, *(sl.step for sl in self.targets)])

    def _first(self, conn: Any, kind: str, step: int, message: str) -> None:
        """Record the first occurrence of a kind of non-finite value as an event."""
        if kind in self.run._seen_nonfinite:
            return
        self.run._seen_nonfinite.add(kind)
        t = time.monotonic() - self.run._t0
        insert_rows(conn, "events", [(None, step, t, kind, message, None)])


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[list[bool]]:
    """Hold Ctrl-C back until the block is done; the list says whether one came. Only the
    main thread can take signals; elsewhere this does nothing."""
    came: list[bool] = []
    if threading.current_thread() is not threading.main_thread():
        yield came
        return
    try:
        previous = signal.signal(signal.SIGINT, lambda signum, frame: came.append(True))
    except (ValueError, OSError):  # no signals here (an embedded interpreter)
        yield came
        return
    try:
        yield came
    finally:
        signal.signal(signal.SIGINT, previous)


_open_runs: set[Run] = set()


@atexit.register
def _close_open_runs() -> None:
    """A script that never closed its run still leaves a complete log and report."""
    for run in list(_open_runs):
        run.close(status="exited")
