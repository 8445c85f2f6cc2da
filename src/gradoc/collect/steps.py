"""The step protocol: what a watched run does at each point of a training step.

Step ``k`` is the work between optimizer step ``k-1`` and optimizer step ``k``:

1. forward: the watched roots' hooks (see ``watched``) and, on activation steps, the
   activation probe's global forward hook (see ``activations``);
2. ``backward()``: the loss is captured by the backward tap (a detached scalar):
   :meth:`Steps.on_backward`;
3. :meth:`Steps.pre_step` (the optimizer's step pre-hook): the statistics point. The
   gradient probe takes its norms (``grads``), the probes theirs; when something is
   decided before the update (skip, clip, locate: the guard or a probe that ``decides``),
   the step's one host read is made here: the loss and the global norm, together with
   the previous step's statistics;
4. :meth:`Steps.post_step` (the step post-hook): weight and update norms; everything the
   step produced, plus the losses of steps not collected since, is added to the run's
   packet (see ``packet``), read then only when nothing was decided at 3.; the writer
   thread turns it into rows (see ``record``).

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

import torch
from torch import Tensor
from torch.optim import Optimizer

from .._state import RngState, rng_state
from .._text import module_label, safe
from ..guard import Guard, Vitals, agree
from ..locate import Origin
from ..store import EventKind
from . import losses, taps
from ._safety import guarded
from .activations import Activations, AmpRanges
from .cleared import Clearing
from .grads import Target, lr_of, received_counts
from .layers import WatchedParam
from .lengths import Lengths
from .locate_probe import Locate
from .manual import ManualSteps
from .packet import Packet
from .padding import PaddingAudit
from .probe import Probe
from .record import Layout, StepRecord, StepRow

if TYPE_CHECKING:
    from ..config import WatchConfig
    from .run import Run


def probes_for(run: Run, config: WatchConfig) -> list[Probe]:
    """The probes a configuration asks for, in the order the step protocol calls them."""
    probes: list[Probe] = [Lengths(run.event)]
    if config.check_amp:
        probes.append(AmpRanges(run))
    if config.check_padding:
        probes.append(PaddingAudit(run))
    if config.locate:
        probes.append(Locate(run))
    return probes


class Steps(taps.LossSink):
    def __init__(self, run: Run, probes: list[Probe]) -> None:
        self.run, self.config, self.guard = run, run.config, run.guard
        self.locator, self.watched, self.probes = run.locator, run.watched, probes
        config = run.config
        self.activations = Activations(run, config.activations, config.activation_modules, probes)
        self.lengths = next(p for p in probes if isinstance(p, Lengths))
        self.decides = self.guard is not None or any(p.decides for p in probes)
        """The step's host read is made at its statistics point (see the module's 3.)."""
        self.count = 0
        """Steps completed so far (of the first optimizer attached)."""
        self.targets: dict[Optimizer, Target] = {}
        self.primary: Optimizer | None = None
        self.device: torch.device | None = None
        self.manual = ManualSteps(run, self)
        self.listeners: list[Callable[[str, int], None]] = []
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
        self._last_transfer = time.monotonic()
        self._seen_nonfinite: set[str] = set()
        self._counting: list[str] = []
        self.origins: dict[int, dict[str, Any]] = {}  # step -> where its NaN was born

    def add(self, optimizer: Any, params: list[WatchedParam], manual: bool = False) -> Target:
        """Watch an optimizer's steps; the first one attached counts the run's steps."""
        target = self.targets[optimizer] = Target(optimizer, params, manual=manual)
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
        if taps.scalar_loss(tensors) is not None:
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
    @torch.no_grad()  # statistics need no autograd graph
    def pre_step(self, optimizer: Optimizer) -> None:
        target = self.targets.get(optimizer)
        if target is not None and not target.ready:  # not read at a clip or unscale_
            self.statistics(target)

    def statistics(self, target: Target) -> None:
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
        if self.decides:
            self._vet(target, primary)
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

    def _vet(self, target: Target, primary: bool) -> None:
        """The first non-finite step is located; the guard (or the default skip) acts."""
        v = self._vitals(target, primary)
        for probe in self.probes:
            probe.decided(target, v)
        if target.manual:
            return  # the program applies its own update: gradoc cannot skip it
        if self.guard is not None:
            self._guard_step(self.guard, target, primary, v)

    def _vitals(self, target: Target, primary: bool) -> Vitals:
        """This step's loss, finiteness and global gradient norm: the step's one host read,
        which carries the previous step's statistics too."""
        micros = self._losses if primary else []
        norms_ = target.grad_norms
        parts = []
        if micros:
            parts.append(losses.mean(micros))
        batch, lengths = self.lengths.take() if primary else (None, [])
        parts += lengths
        if norms_ is not None:
            # a sum is finite exactly when every term is (or overflows, which is as bad)
            parts.append(norms_.sum())
            if self.guard is not None and self.guard.needs_norm:
                wide = torch.float32 if norms_.device.type == "mps" else torch.float64
                parts.append(torch.linalg.vector_norm(norms_.to(wide)))
        if not parts:
            self.lengths.observe(target.steps, batch, [])
            return Vitals(False, False, None, None)
        at = [self._packet.add(p) for p in parts]
        values = self._packet.read()[at[0].start : at[-1].stop].tolist()
        loss = values.pop(0) if micros else None
        self.lengths.observe(target.steps, batch, values[: len(lengths)])
        del values[: len(lengths)]
        grads_bad = not math.isfinite(values[0]) if norms_ is not None else False
        norm = values[1] if len(values) > 1 else None
        if grads_bad:
            grads_bad, global_norm = target.recheck(self.device)
            norm = global_norm if norm is not None else None
        return Vitals(loss is not None and not math.isfinite(loss), grads_bad, loss, norm)

    def _guard_step(self, guard: Guard, target: Target, primary: bool, v: Vitals) -> None:
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
    @torch.no_grad()  # statistics need no autograd graph
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
        waiting = len(self._packet) > 0  # a step's statistics not read yet
        if (
            self._collected()
            or len(self._pending) >= self.config.flush_every_steps
            or time.monotonic() - self._last_transfer >= self.config.flush_every_s
        ):
            self._transfer()
        if waiting or not self.decides:
            # read now: nothing before the next update needs the host (or a step read
            # nothing at its statistics point, so two steps' statistics wait)
            self._packet.read()
        for probe in self.probes:
            probe.end_step(self.count, self.activations.armed)
        self.count += 1
        self.activations.arm(self.activations.wanted(self.count))
        if not target.manual:
            self.locator.after_step()
        for listener in self.listeners:
            listener("end", self.count - 1)

    def _transfer(self) -> None:
        """Add this step's statistics and pending losses to the packet; the step's rows are
        made when it is read (at the next step's statistics point, or now, see post_step)."""
        pack = self._packet
        rows = [
            (r, pack.add(r.loss) if r.loss is not None else None, _divisors(pack, r.divisors))
            for r in self._pending
        ]
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
            t.slices(pack, t.optimizer is self.primary)
            for t in self.targets.values()
            if t.collected()
        ]
        acts = self.activations.pack(pack)
        layout = Layout(self.count, rows, lrs, targets, acts, clips, unused)
        self._pending = []
        for t in self.targets.values():
            t.reset()
        self._last_transfer = time.monotonic()
        pack.on_read(lambda host: self._received(host, layout))

    def _received(self, host: Tensor, layout: Layout) -> None:
        """A step's statistics reached the host: hand them to the writer thread."""
        counts: dict[int, float] = {}
        for sl in layout.targets:
            counts.update(received_counts(sl, host))
            for probe in self.probes:
                probe.received(sl, host)
        self.run.put(StepRecord(host, layout, counts, self._seen_nonfinite, self.run.t0))

    def _collected(self) -> bool:
        return self.activations.waiting() or any(t.collected() for t in self.targets.values())

    def unsent(self) -> bool:
        return self._to_transfer() or len(self._packet) > 0

    def _to_transfer(self) -> bool:
        return bool(self._pending or self._unbacked.unused) or self._collected()

    def send(self) -> None:
        """Everything collected so far, to the writer thread (one host read)."""
        if self._to_transfer():
            self._transfer()
        self._packet.read()

    def send_last(self) -> None:
        """At close: what is still unsent; a failure costs the last step, not the log."""
        if self.unsent() and not self.run.broken:
            try:
                self.send()
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
