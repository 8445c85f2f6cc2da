"""The step protocol: what a watched run does at each point of a training step.

Step ``k`` is the work between optimizer step ``k-1`` and optimizer step ``k``:

1. forward: the watched roots' hooks (see ``watched``) and, on activation steps, the
   activation probe's global forward hook (see ``activations``);
2. ``backward()``: the loss is captured by the backward tap (a detached scalar):
   :meth:`Steps.on_backward`;
3. :meth:`Steps.pre_step` (the optimizer's step pre-hook): the statistics point. The
   gradient probe takes its norms (``grads``), the probes theirs; the step's vitals (its
   loss and norms) are read here where that costs no waiting (the CPU; the guard, which
   decides before the update; see :meth:`Steps.checks_now`), and a non-finite step is
   located before its update;
4. :meth:`Steps.post_step` (the step post-hook): weight and update norms; the step's
   statistics wait on the device, and every few steps (:meth:`Steps.send`) everything
   waiting travels to the host as one packet (see ``packet``), read at once on the CPU and
   behind the device's work on an accelerator; the writer thread turns it into rows (see
   ``record``).

``gradoc run``, Lightning and the Hugging Face callback drive the same points:
:meth:`Steps.before_step` (a step that may take a closure), :meth:`Steps.pre_step`,
:meth:`Steps.post_step` and :meth:`Steps.begin_step` (a step whose forward does not go
through the watched model's ``forward()``).

An optimizer step given a closure (LBFGS) has its statistics read after the closure's
first call, inside the step. A program with no optimizer has its steps counted at its
``backward()`` / ``torch.autograd.grad`` calls (see ``manual``): the statistics point is
when the call returns, the step ends at the next call.
"""

from __future__ import annotations

import functools
import math
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor
from torch.optim import Optimizer

from .._util.state import RngState, rng_state
from .._util.text import module_label, safe
from ..guard import Guard, Vitals, agree
from ..locate import Origin
from ..store import EventKind
from . import losses, taps
from ._safety import guarded, without_grad
from .activations import Activations, AmpRanges, Calls
from .cleared import Clearing
from .grads import WatchedOptimizer, lr_of, received_counts
from .layers import WatchedParam
from .lengths import Lengths
from .locate_probe import Locate
from .manual import ManualSteps
from .notebook import LiveStatus, in_notebook
from .packet import Packet
from .padding import PaddingAudit
from .probe import Probe
from .record import Layout, StepRecord, StepRow

if TYPE_CHECKING:
    from ..config import WatchConfig
    from .context import Internal


def probes_for(run: Internal, config: WatchConfig) -> list[Probe]:
    """The probes a configuration asks for, in the order the step protocol calls them."""
    probes: list[Probe] = [Lengths(run.event)]
    if config.check_amp:
        probes.append(AmpRanges(run))
    if config.check_padding:
        probes.append(PaddingAudit(run))
    if config.locate:
        probes.append(Locate(run))
    if config.live and in_notebook():
        probes.append(LiveStatus(run, run.dir))
    return probes


class Steps(taps.TapReceiver):
    def __init__(self, run: Internal, probes: list[Probe]) -> None:
        self.run, self.config, self.guard = run, run.config, run.guard
        self.locator, self.watched, self.probes = run.locator, run.watched, probes
        config = run.config
        self.activations = Activations(run, config.activations, config.activation_modules, probes)
        self.lengths = next(p for p in probes if isinstance(p, Lengths))
        self.count = 0
        """Steps completed so far (of the first optimizer attached)."""
        self.targets: dict[Optimizer, WatchedOptimizer] = {}
        self.primary: Optimizer | None = None
        self.device: torch.device | None = None
        self.manual = ManualSteps(run, self)
        self.listeners: list[Callable[[str, int], None]] = []
        self.last_loss: tuple[int, float] | None = None
        """The newest step whose loss reached the host, and that loss, kept when some probe
        ``wants_loss`` (a status line's)."""
        self._keep_loss = any(p.wants_loss for p in probes)
        self.rerun: tuple[Callable[[], Any], RngState] | None = None
        """A step given a closure, while its statistics are read: what replays it."""
        self._packet = Packet()
        """The device tensors waiting for the step's one host read (see ``packet``)."""
        self._losses: list[losses.Micro] = []
        self._n_backward = 0
        self._clearing = Clearing()
        """Whether the program clears gradients between steps (``cleared``)."""
        self._loss_fn_seen = False
        self._loss_read: dict[str, Any] = {}
        """How the loss is read (``meta['loss_read']``), said once it is known."""
        self._scaled: dict[int, tuple[Any, Tensor]] = {}
        """Losses a GradScaler scaled, by the scaled tensor's node (see ``losses.read``)."""
        self._unbacked = losses.Unbacked()
        """Losses the program read or its model returned, until a backward() shows whether
        they were backpropagated."""
        self._clip: tuple[float, Tensor] | None = None
        """The step's clipping: (threshold, the norm measured before it) on the device."""
        self._clips = 0
        self._clip_meta: dict[str, Any] | None = None
        self._scaler_skips = 0
        self._optimizers: list[dict[str, Any]] = []
        self._closure_open = False
        self._pending: list[StepRow] = []
        self._acts: list[tuple[int, dict[int, Calls]]] = []
        """Activation steps' statistics in the packet: (step, where they lie)."""
        self._last_transfer = time.monotonic()
        self._every = 1
        """Steps per transfer (see ``send``)."""
        self._step_at: float | None = None
        self._step_s = 0.0
        """A running mean of the step's duration (seconds)."""
        self._bad = False
        """The step's vitals came back non-finite: its statistics travel at its end."""
        self._synced = False
        """A step read later was non-finite: every step is read at once from then on."""
        self._seen_nonfinite: set[str] = set()
        self._counting: list[str] = []
        self.origins: dict[int, dict[str, Any]] = {}  # step -> where its NaN was born

    def add(
        self, optimizer: Any, params: list[WatchedParam], manual: bool = False
    ) -> WatchedOptimizer:
        """Watch an optimizer's steps; the first one attached counts the run's steps."""
        target = self.targets[optimizer] = WatchedOptimizer(optimizer, params, manual=manual)
        if not manual:  # what the updates are expected to look like depends on it
            self._optimizers.append(_described(optimizer))
            self.run.set_meta(optimizers=self._optimizers)
        if self.primary is None:
            self.primary = optimizer
            self.activations.arm(self.activations.wanted(self.count))
        if self.device is None and params:
            self.device = params[0].param.device
        return target

    def hook(self, optimizer: Optimizer) -> list[Any]:
        """Route the optimizer's steps here, through its own step hooks; their handles."""
        return [
            optimizer.register_step_pre_hook(lambda o, a, k: self.before_step(o, a, k)),
            optimizer.register_step_post_hook(lambda o, a, k: self.post_step(o)),
        ]

    def counted_by(self, how: str) -> None:
        """Say once in the log how steps are counted (the report shows it)."""
        if how not in self._counting:
            self._counting.append(how)
            self.run.set_meta(steps_counted_by=list(self._counting))

    def record_origin(self, origin: Origin) -> None:
        """Log where a step's NaN/Inf was born (an event the report reads)."""
        self.origins[origin.step] = origin.to_json()
        where = f" in {module_label(origin.module)}" if origin.module is not None else ""
        at = f" ({origin.file}:{origin.line})" if origin.file else ""
        message = f"{origin.phase}: {origin.op}{where}{at}"
        self.run.event(
            EventKind.NONFINITE_ORIGIN, message, step=origin.step, origin=origin.to_json()
        )

    def remove(self, optimizer: Any) -> None:
        self.targets.pop(optimizer, None)
        self.primary = None if self.primary is optimizer else self.primary

    # -- loss (the backward tap) ----------------------------------------------------------
    @guarded
    def on_backward(self, tensors: Any, inputs: Any = None, direct: bool = True) -> None:
        if not direct:
            return  # PyTorch's own call (a reentrant checkpoint), not a step of the program
        root = _one(tensors)
        if isinstance(root, Tensor) and root.grad_fn is not None:
            # before a step without an optimizer ends here: what it read belongs to it
            self._unbacked.backward(root.grad_fn)
        self.manual.on_backward(tensors, inputs)
        # With several runs open, a run takes only losses computed after its own model ran
        # (a run attached later by `gradoc run` takes everything until it knows its model).
        if self.watched.prefixes and not self.watched.forward_seen:
            return
        self._n_backward += 1
        if self._closure_open:
            return  # a closure called again within its step (LBFGS): the first loss counts
        if taps.is_scalar_loss(tensors):
            micro = losses.read(root, self._scaled)
            self._losses.append(micro)
            self.activations.on_loss(tensors)
            if not self._loss_fn_seen:  # what the loss is says what its chance level is
                self._loss_fn_seen = True
                self._say_loss(micro, kind=losses.kind(micro.node))

    def _say_loss(self, micro: losses.Micro | None, **facts: Any) -> None:
        """Tell the run log how the loss is read (once, and when something new is known)."""
        read = dict(self._loss_read)
        if micro is not None:
            read["from"] = "backward()"
            if micro.scaled:
                read["unscaled"] = "GradScaler"
        read |= facts
        if read != self._loss_read:
            self._loss_read = read
            kind = read.get("kind") or {}
            self.run.set_meta(loss_read=read, loss_fn=kind)

    @guarded
    def on_value(self, tensor: Tensor, value: float | None, how: str) -> None:
        if self.run.closed:
            return
        self._unbacked.add(tensor, value, how, self._loss_step())

    def on_forward_output(self, output: Any) -> None:
        """A watched model returned: a loss it computed (nanoGPT's ``logits, loss``, a
        Hugging Face ``ModelOutput.loss``) is the step's, backpropagated or not."""
        loss = losses.returned_loss(output)
        if loss is not None:
            self._unbacked.add(loss, None, "returned by the model's forward()", self._loss_step())
            if "returned" not in self._loss_read:
                self._say_loss(None, returned="by the model's forward()")

    def _loss_step(self) -> int:
        """The step a loss computed now belongs to: without an optimizer, the open step is
        still the last ``backward()``'s, and the loss is the next one's."""
        return self.count + (1 if self.manual.open else 0)

    @guarded
    def on_scaled(self, loss: Tensor, scaled: Tensor) -> None:
        if scaled.grad_fn is not None and not self.run.closed:
            if len(self._scaled) > 16:  # scaled and never backpropagated: not kept for long
                self._scaled.clear()
            self._scaled[id(scaled.grad_fn)] = (scaled.grad_fn, loss)

    # -- the program's own clipping and loss scaling --------------------------------------
    @guarded
    def on_grads_ready(self, optimizer: Optimizer | None, params: list[Tensor]) -> None:
        """Gradients about to be clipped, or just unscaled: the step's statistics point
        comes now, so that the gradients recorded are those the backward produced."""
        if self.run.closed:
            return
        if optimizer is None:
            optimizer = self._holding(params)
        if optimizer is None:
            return
        if optimizer not in self.targets and self.run.attach_early is not None:
            self.run.attach_early(optimizer)  # gradoc run: attached before its first step
        target = self.targets.get(optimizer)
        if target is not None and not target.manual and not target.ready:
            self.pre_step(optimizer)

    def _holding(self, params: list[Tensor]) -> Optimizer | None:
        """The optimizer of the clipped parameters: the watched one holding the first of
        them (no pass over every tensor on a step), else any live one."""
        if not params:
            return None
        for optimizer, target in self.targets.items():
            if not target.manual and id(params[0]) in target.ids():
                return optimizer
        return taps.optimizer_of(params[:1])

    @guarded
    def on_clip(self, kind: str, threshold: float, measured: Tensor, norm_type: float) -> None:
        if self.run.closed or not isinstance(measured, Tensor):
            return
        self._clips += 1
        if self._clip is None:
            self._clip = (threshold, measured.detach().reshape(()))
        said = {"fn": kind, "threshold": threshold}
        if not math.isnan(norm_type):
            said["norm_type"] = norm_type
        if said != self._clip_meta:
            self._clip_meta = said
            self.run.set_meta(clipping=said)

    @guarded
    def after_scaler_step(self, optimizer: Optimizer) -> None:
        """A GradScaler that found an inf/NaN gradient did not call ``optimizer.step()``:
        the step ends here, without an update (the statistics were read at its
        ``unscale_``)."""
        target = self.targets.get(optimizer)
        if target is None or not target.ready or self.run.closed:
            return
        target.before = None  # no update was made: not a tiny one
        self._scaler_skips += 1
        if self._scaler_skips <= 10:
            self.run.event(
                EventKind.SCALER_SKIPPED, "the GradScaler skipped this step (inf/NaN gradients)"
            )
        self.post_step(optimizer)

    def after_backward(self, tensors: Any, inputs: Any, grads: Any, direct: bool) -> None:
        if direct:
            self.manual.after_backward(grads)

    def begin_step(self) -> None:
        """Mark the start of a step whose forward pass does not go through the watched
        model's ``forward()`` (Lightning's ``training_step``): its loss belongs to this run."""
        self.watched.forward_seen = True

    # -- the statistics point -------------------------------------------------------------
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
        taps.reading_items(False)  # the optimizer's own item() calls, one per parameter
        if not callable(closure) or self.run.closed:
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
            if called[0] or self.run.closed:
                return closure()
            called[0] = True
            rng = rng_state()
            result = closure()
            if attach is not None:
                attach()
            self.rerun = (closure, rng)  # a replay of this step calls it again, traced
            try:
                self.pre_step(optimizer)
            finally:
                self.rerun = None
            self._closure_open = True  # its next calls' losses are not the step's
            return result

        return first_call_read

    @guarded
    @without_grad
    def pre_step(self, optimizer: Optimizer) -> None:
        target = self.targets.get(optimizer)
        if target is not None and not target.ready:  # not read at a clip or unscale_
            self.statistics(target)

    def statistics(self, target: WatchedOptimizer) -> None:
        primary = target.optimizer is self.primary
        target.ready = True
        self.locator.pause()
        # a guard asked for reads every step's norms (and so records them)
        want_grads = self.config.grads(target.steps) or self._guard_asked()
        if target.collect(want_grads, self.config.params(target.steps), self.device):
            self.locator.done = True  # sharded (FSDP2): a replay on one rank would hang
        if primary:
            self._clearing.at_statistics(target, self._n_backward, self.count)
        for probe in self.probes:
            probe.at_statistics(target, primary)
        if primary:
            self.lengths.take(target.steps)
        if self.checks_now():
            self._vet(target, primary)
        elif primary:  # read later: what a replay of this step would need is kept
            self.locator.keep(target.steps, self.config.flush_every_steps + 8)
        for probe in self.probes:
            probe.after_statistics(target, primary)
        if target.manual:  # the next forward comes before the next backward: arm now
            self.locator.after_step()
        if primary:
            for listener in self.listeners:
                listener("stats", self.count)

    def _guard_asked(self) -> bool:
        """The run was given a guard (not only the default that skips)."""
        return self.guard is not None and self.guard.every_step

    def _vet(self, target: WatchedOptimizer, primary: bool) -> None:
        """The first non-finite step is located; the guard (or the default skip) acts."""
        v = self._vitals(target, primary)
        for probe in self.probes:
            probe.decided(target, v)
        if target.manual:
            return  # the program applies its own update: gradoc cannot skip it
        if self.guard is not None:
            self._guard_step(self.guard, target, primary, v)

    def _vitals(self, target: WatchedOptimizer, primary: bool) -> Vitals:
        """This step's loss, finiteness and global gradient norm, read now: a few scalars
        (on the CPU a read, not a synchronisation; see ``checks_now``)."""
        micros = self._losses if primary else []
        if self.guard is None and self._vitals_fine(micros, target):
            return Vitals(False, False, None, None)
        norms_ = target.grad_norms
        wants_norm = self.guard is not None and self.guard.needs_norm
        parts = [losses.mean(micros)] if micros else []
        if norms_ is not None:
            # a sum is finite exactly when every term is (or overflows, which is as bad)
            parts.append(norms_.sum())
            if wants_norm:
                wide = torch.float32 if norms_.device.type == "mps" else torch.float64
                parts.append(torch.linalg.vector_norm(norms_.to(wide)))
        if not parts:
            return Vitals(False, False, None, None)
        dtype = torch.float32 if parts[0].device.type == "mps" else torch.float64
        values = torch.stack([p.to(dtype) for p in parts]).tolist()
        loss = values.pop(0) if micros else None
        grads_bad = not math.isfinite(values[0]) if norms_ is not None else False
        norm = values[1] if len(values) > 1 else None
        if grads_bad:
            grads_bad, global_norm = target.recheck(self.device)
            norm = global_norm if norm is not None else None
        loss_bad = loss is not None and not math.isfinite(loss)
        if (loss_bad or grads_bad) and primary:
            self._bad = True  # its statistics travel at its end, with its gradients' counts
        return Vitals(loss_bad, grads_bad, loss, norm)

    def _vitals_fine(self, micros: list[losses.Micro], target: WatchedOptimizer) -> bool:
        """Nothing decided on the values: whether the loss and every norm are finite, read
        with as few ops as there can be (this runs every step; a non-finite one is measured
        again by :meth:`_vitals`): few norms are read one scalar each, more summed once."""
        now = target.now
        found = now.norms if now is not None else None
        values = [taps.raw_item(m.value) for m in micros]
        if isinstance(found, tuple):
            values += [taps.raw_item(t) for t in found]
        elif found is not None:
            values.append(taps.raw_item(found.sum()))
        # a sum is finite exactly when every term is (or overflows: measured again)
        return math.isfinite(sum(values)) if values else True

    def _guard_step(self, guard: Guard, target: WatchedOptimizer, primary: bool, v: Vitals) -> None:
        if guard.collective:
            v = agree(v, self.device)
        step = target.steps
        d = guard.decide(target.optimizer, step, primary, v)
        if d.skip or d.rollback:
            target.drop_grads()
            if v.bad:
                reason = d.reason if d.skip else "non-finite"
                guard.skipped_step(target.optimizer, step, reason, self.origins.get(step))
        models, optimizers = list(self.watched.prefixes), list(self.targets)
        if d.rollback:
            guard.rollback(d.to, step, d.reason, models, optimizers, d.diverged)
        elif d.clip_to is not None and v.norm is not None:
            grads = [w.param.grad for w in target.present if w.param.grad is not None]
            guard.clip(grads, v.norm, d.clip_to, step)
        if primary and not (d.skip or d.rollback):
            guard.maybe_snapshot(step, models, optimizers)

    # -- the step's end -------------------------------------------------------------------
    @guarded
    @without_grad
    def post_step(self, optimizer: Any) -> None:
        taps.reading_items(True)
        target = self.targets.get(optimizer)
        if target is None:
            return
        target.stepped(self.device)
        target.ready = False
        if self.guard is not None:
            self.guard.stepped(optimizer)
        if optimizer is not self.primary:
            return
        self._clearing.after_step(target)
        loss, divisors = losses.step_values(self._losses) if self._losses else (None, None)
        lrs = [] if target.manual else [lr_of(g) for g in target.optimizer.param_groups]
        samples = self.watched.samples or None
        t = time.monotonic() - self.run.t0
        row = StepRow(self.count, t, self._n_backward, samples, lrs, loss, divisors, self._clip)
        self._pending.append(row)
        self._losses, self._n_backward, self.watched.forward_seen = [], 0, False
        self._clip = None
        self.watched.samples, self._closure_open = 0, False
        self._pack_activations()  # this step's outputs, packed now, read later
        now = time.monotonic()
        if self._step_at is not None:
            self._step_s += (now - self._step_at - self._step_s) / 8  # a running mean
        self._step_at = now
        if not self.checks_now():
            self._packet.poll()  # what arrived from the device (no waiting)
        if (
            self._bad
            or len(self._pending) >= self._every
            or now - self._last_transfer >= self.config.flush_every_s
        ):
            self._bad = False
            self.send()
        for probe in self.probes:
            probe.end_step(self.count, self.activations.armed)
        self.count += 1
        self.activations.arm(self.activations.wanted(self.count))
        if not target.manual:
            self.locator.after_step()
        for listener in self.listeners:
            listener("end", self.count - 1)

    def _transfer(self) -> None:
        """Add the waiting steps' statistics and losses to the packet; their rows are made
        when it is read (see :meth:`send`)."""
        pack = self._packet
        rows = _loss_rows(pack, self._pending)
        clips = {k: pack.add(r.clip[1]) for k, r in enumerate(self._pending) if r.clip is not None}
        unused = [
            (u, pack.add(u.value) if isinstance(u.value, Tensor) else None)
            for u in self._unbacked.take()
        ]
        lrs = {
            (k, i): pack.add(lr)
            for k, r in enumerate(self._pending)
            for i, lr in enumerate(r.lrs)
            if isinstance(lr, Tensor)
        }
        targets = [
            sl
            for t in self.targets.values()
            if t.collected()
            for sl in t.slices(pack, t.optimizer is self.primary)
        ]
        self._pack_activations()
        self.lengths.pack(pack)
        later = not self.checks_now()
        layout = Layout(self.count, rows, lrs, targets, self._acts, clips, unused, later)
        self._pending, self._acts = [], []
        self._last_transfer = time.monotonic()
        pack.on_read(lambda host: self._received(host, layout))

    def _pack_activations(self) -> None:
        """The current step's module outputs, if it sampled any, into the packet."""
        if self.activations.waiting():
            self._acts.append((self.count, self.activations.pack(self._packet)))

    def _received(self, host: Tensor, layout: Layout) -> None:
        """A transfer's statistics reached the host: hand them to the writer thread."""
        counts: dict[tuple[int, int], float] = {}
        finite = bool(np.isfinite(host.numpy()).all())  # the common case: nothing to count
        if self._keep_loss:
            self.last_loss = layout.newest_loss(host.numpy()) or self.last_loss
        for sl in layout.targets:
            if not finite:
                counts.update(((sl.step, i), c) for i, c in received_counts(sl, host).items())
            for probe in self.probes:
                probe.received(sl, host)
        if layout.later:
            self._read_later(host, layout)
        record = StepRecord(host, layout, counts, self._seen_nonfinite, self.run.t0)
        self.run.put(record, now=True)

    def _read_later(self, host: Tensor, layout: Layout) -> None:
        """Steps whose vitals were not read at their statistics point (an accelerator's):
        the first non-finite one is located now, and every later step is read at once."""
        values = host.numpy()
        bad: dict[int, bool] = {}  # step -> its loss was non-finite
        for row, loss_at, _ in layout.rows:
            if loss_at is not None and not np.isfinite(values[loss_at]).all():
                bad[row.step] = True
        for sl in layout.targets:
            if sl.primary and sl.norms is not None and not np.isfinite(values[sl.norms]).all():
                bad.setdefault(sl.step, False)
        if not bad:
            self.locator.read(layout.step)
            return
        first = min(bad)
        self._synced = True
        for probe in self.probes:
            probe.late(first, self.count, bad[first])

    def _collected(self) -> bool:
        return (
            bool(self._acts)
            or self.activations.waiting()
            or any(t.collected() for t in self.targets.values())
        )

    def unsent(self) -> bool:
        return self._to_transfer() or len(self._packet) > 0 or self._packet.poll() > 0

    def _to_transfer(self) -> bool:
        return bool(self._pending or self._unbacked.unused) or self._collected()

    def checks_now(self) -> bool:
        """Each step's vitals are read at its statistics point: on the CPU, where a read
        is no synchronisation (a few scalars, ~5 us), wherever the guard decides before the
        update, and once a step read later was non-finite. Elsewhere (an accelerator) a
        step's vitals travel with its statistics, read behind the device's work: no step
        waits for the device."""
        return (
            self._synced
            or self.guard is not None
            or self.device is None
            or self.device.type == "cpu"
        )

    def send(self, wait: bool = False) -> None:
        """Everything collected so far, to the writer thread (one host read). How often:
        every ``_every`` steps, chosen so that a transfer costs under 1% of the steps it
        carries (at most ``flush_every_steps``; at least every ``flush_every_s``). Read at
        once (on the CPU, or ``wait``), else sent and read when it arrived (see
        ``packet``)."""
        t = time.perf_counter()
        if self._to_transfer():
            self._transfer()
        if wait or self.checks_now():
            self._packet.read()
        else:
            self._packet.send()
            self._packet.poll()
        self._every = self._cadence(time.perf_counter() - t)

    def _cadence(self, took: float) -> int:
        """Steps per transfer, from what the last one took (``took`` seconds): enough that
        it costs under 1% of the steps it carries, at most ``flush_every_steps``."""
        if self._step_s <= 0:
            return 1
        wanted = math.ceil(took / (0.01 * self._step_s))
        return max(1, min(self.config.flush_every_steps, wanted))

    def send_last(self) -> None:
        """At close: what is still unsent; a failure costs the last step, not the log."""
        if self.unsent() and not self.run.broken:
            try:
                self.send(wait=True)
            except Exception as exc:  # the log so far is still written and reported
                print(f"gradoc: could not record the last step: {safe(exc)}", file=sys.stderr)

    def close(self) -> dict[str, Any]:
        """The last step ends (a program without an optimizer ends one here), the probes
        close; what they leave for the run log's ``meta``."""
        if self.manual.open:
            self.manual.end(None)
        self._unbacked.close()
        if self._losses:  # backpropagated, but the step never ended (the program stopped)
            step = self.count
            for m in self._losses:
                how = "backpropagated; the step never ended"
                seen = losses.Seen(m.node, m.value, how, step, backpropagated=True)
                self._unbacked.unused.append(seen)
            self._losses = []
        self.activations.arm(False)
        self.send_last()  # what waits reaches the host before the probes sum up
        meta: dict[str, Any] = {}
        if self._clips:
            meta["clip_calls"] = self._clips
        if self._scaler_skips:
            meta["scaler_skipped_steps"] = self._scaler_skips
        meta |= self._clearing.summary()
        for probe in self.probes:
            meta |= probe.close(self.count)
        return meta


def _one(tensors: Any) -> Any:
    """``backward()``'s first argument as one tensor when it is one."""
    if isinstance(tensors, (list, tuple)) and len(tensors) == 1:
        return tensors[0]
    return tensors


def _loss_rows(
    pack: Packet, pending: list[StepRow]
) -> list[tuple[StepRow, slice | None, list[slice | None] | None]]:
    """The pending steps with where their losses (and divisors) lie in the packet: the
    common steps' (one loss, no divisor) stacked into one part."""
    plain = [r for r in pending if r.loss is not None and r.loss.dim() == 0 and not r.divisors]
    at = pack.add(torch.stack([r.loss for r in plain])) if len(plain) > 1 else None  # type: ignore[misc]
    k = 0
    rows: list[tuple[StepRow, slice | None, list[slice | None] | None]] = []
    for r in pending:
        if at is not None and k < len(plain) and r is plain[k]:
            rows.append((r, slice(at.start + k, at.start + k + 1), None))
            k += 1
        else:
            loss_at = pack.add(r.loss) if r.loss is not None else None
            rows.append((r, loss_at, _divisors(pack, r.divisors)))
    return rows


def _divisors(pack: Packet, divisors: list[Tensor | None] | None) -> list[slice | None] | None:
    """Where a step's loss divisors lie in the packet (see ``losses.step_values``)."""
    if divisors is None:
        return None
    return [pack.add(d) if d is not None else None for d in divisors]


def _described(optimizer: Any) -> dict[str, Any]:
    """An optimizer's type and first group's settings, for the run log's ``meta``."""
    group = optimizer.param_groups[0] if optimizer.param_groups else {}
    said: dict[str, Any] = {"type": type(optimizer).__name__, "groups": len(optimizer.param_groups)}
    for key in ("lr", "momentum", "betas", "eps", "weight_decay"):
        value = group.get(key)
        if isinstance(value, Tensor):
            continue  # a capturable optimizer's tensor: not read here
        if isinstance(value, (int, float, tuple, list)) and not isinstance(value, bool):
            said[key] = list(value) if isinstance(value, tuple) else value
    return said
