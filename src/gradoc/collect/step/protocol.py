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
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor
from torch.optim import Optimizer

from ..._util import entry
from ..._util.json_types import JsonObject
from ..._util.objects import IdMap
from ..._util.state import RngState, rng_state
from ..._util.text import module_label
from ...locate import Origin
from ...store import EventKind
from .._safety import guarded, without_grad
from ..attach import ManualSteps, ProgramClipping, WatchedParam, taps
from ..graph import losses
from ..probe import Probe
from ..probes import (
    Activations,
    AmpRanges,
    Clearing,
    Lengths,
    LiveStatus,
    Locate,
    PaddingAudit,
    SetupCheck,
    WatchedOptimizer,
    eps_shares,
    in_notebook,
    lr_of,
)
from ..resume import Resumption
from .cadence import Cadence
from .loss_reading import LossReader
from .objectives import Objectives
from .record import StepRow
from .transfers import Transfers
from .vitals import StepChecks

if TYPE_CHECKING:
    from ...config import WatchConfig
    from ..context import Internal


def probes_for(run: Internal, config: WatchConfig) -> list[Probe]:
    """The probes a configuration asks for, in the order the step protocol calls them."""
    probes: list[Probe] = [Lengths(run.event), SetupCheck(run)]
    cadence = Cadence.of(run)  # the sampled probes' budget: the run's config samples by it
    if cadence is not None:
        probes.append(cadence)
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
        self.points = run.watched.points  # what each point of a step calls, bound once
        config = run.config
        self.activations = Activations(
            run, config.activations, config.activation_modules, self.points.on_output
        )
        self.lengths = next(p for p in probes if isinstance(p, Lengths))
        self.count = 0  # steps completed so far (of the first optimizer attached)
        self.targets: IdMap[Optimizer, WatchedOptimizer] = IdMap()
        self.primary: Optimizer | None = None
        self.device: torch.device | None = None
        self.manual = ManualSteps(run, self)
        self.listeners: list[Callable[[str, int], None]] = []
        self.rerun: tuple[Callable[[], Any], RngState] | None = None
        """A step given a closure, while its statistics are read: what replays it."""
        self.loss = LossReader(run)  # the step's losses and how they are read
        self.clipping = ProgramClipping(run)  # the program's own clipping and loss scaling
        self.transfers = Transfers(run, self)  # the statistics on their way to the run log
        self.checks = StepChecks(self)
        """The step's vitals, read where that costs no waiting; the guard's decisions."""
        self._clearing = Clearing()  # whether the program clears gradients between steps
        self._optimizers: list[JsonObject] = []
        self.several = False  # several optimizers train (or will): see ``objectives``
        self.objectives = Objectives()
        self._counting: list[str] = []
        self.origins: dict[int, Origin] = {}  # step -> where its NaN was born
        self.reads_graph = any(isinstance(p, Locate) for p in probes)
        self.cadence = next((p for p in probes if isinstance(p, Cadence)), None)  # the budget
        self.resumption: Resumption | None = None
        """A resumed run, until its first step fixes where its segment starts (``resume``)."""
        self._reads: tuple[int, bool] = (-1, False)  # the step asked last, and the answer

    def add(
        self, optimizer: Any, params: list[WatchedParam], manual: bool = False
    ) -> WatchedOptimizer:
        """Watch an optimizer's steps; the first one attached counts the run's steps."""
        target = self.targets[optimizer] = WatchedOptimizer(optimizer, params, manual=manual)
        if self.resumption is not None:  # its steps go on from where the program resumed
            target.steps = self.resumption.start(optimizer)
            self.count = target.steps if self.primary is None else self.count
        if not manual:  # what the updates are expected to look like depends on it
            self._optimizers.append(_described(optimizer) | _born(optimizer))
            self.run.set_meta(optimizers=self._optimizers)
            # gradoc run attaches one at a time: others alive will be attached at their step
            alive = self.run.attach_early is not None and len(taps.live_optimizers()) > 1
            self.several = len(self._optimizers) > 1 or alive
        if self.primary is None:
            self.primary = self.objectives.primary = optimizer
            self.activations.arm(self.activations.wanted(self.count))
        if self.device is None and params:
            self.device = params[0].param.device
        return target

    def hook(self, optimizer: Optimizer) -> list[Any]:
        """Route the optimizer's steps here, through its own step hooks; their handles."""
        pre, post = entry.step_pre_hook, entry.step_post_hook  # guarded (``_util.entry``)
        return [pre(optimizer, self.before_step), post(optimizer, self.post_step)]

    def counted_by(self, how: str) -> None:
        """Say once in the log how steps are counted (the report shows it)."""
        if how not in self._counting:
            self._counting.append(how)
            self.run.set_meta(steps_counted_by=list(self._counting))

    def record_origin(self, origin: Origin) -> None:
        """Log where a step's NaN/Inf was born (an event the report reads)."""
        self.origins[origin.step] = origin
        self.run.event(
            EventKind.NONFINITE_ORIGIN, _said(origin), step=origin.step, origin=origin.to_json()
        )

    def remove(self, optimizer: Any) -> None:
        self.targets.pop(optimizer, None)
        self.primary = None if self.primary is optimizer else self.primary

    # -- loss (the backward tap) ----------------------------------------------------------
    @guarded
    def on_backward(
        self, tensors: Any, inputs: Any = None, direct: bool = True, gradients: Any = None
    ) -> None:
        if not direct:
            return  # PyTorch's own call (a reentrant checkpoint), not a step of the program
        root = _one(tensors)
        if isinstance(root, Tensor) and root.grad_fn is not None:
            # before a step without an optimizer ends here: what it read belongs to it
            self.loss.backward(root.grad_fn)
        self.manual.on_backward(tensors, inputs)
        if self.loss.elsewhere():
            return
        self.loss.backward_calls += 1
        if self.loss.closure_open:
            return  # a closure called again within its step (LBFGS): the first loss counts
        if gradients is None and taps.is_scalar_loss(tensors):
            self.loss.read(root, joined=self.manual.joined)
            if self.reads_graph and self.checks_now():  # a read that waits for nothing
                step = self.count if self.manual.joined else self._loss_step()
                self.locator.on_loss(root, self.loss.micros[-1], step)
            self.activations.on_loss(tensors)
            return
        self.loss.read_handed(tensors, gradients, self.manual.joined)

    @guarded
    def on_value(self, tensor: Tensor, value: float | None, how: str) -> None:
        if self.run.closed:
            return
        self.loss.unbacked.add(tensor, value, how, self._loss_step())

    def on_forward_output(self, output: Any) -> None:
        self.loss.returned(output, self._loss_step())

    def _loss_step(self) -> int:
        """The step a loss computed now belongs to: without an optimizer, the open step is
        still the last ``backward()``'s, and the loss is the next one's."""
        return self.count + (1 if self.manual.open else 0)

    @guarded
    def on_scaled(self, loss: Tensor, scaled: Tensor) -> None:
        if not self.run.closed:
            self.loss.scaled(loss, scaled)

    # -- the program's own clipping and loss scaling --------------------------------------
    @guarded
    def on_grads_ready(self, optimizer: Optimizer | None, params: list[Tensor]) -> None:
        """Gradients about to be clipped, or just unscaled: the step's statistics point
        comes now, so that the gradients recorded are those the backward produced."""
        if self.run.closed:
            return
        if optimizer is None:
            optimizer = _holding(self.targets, params)
        if optimizer is None:
            return
        if optimizer not in self.targets and self.run.attach_early is not None:
            self.run.attach_early(optimizer)  # gradoc run: attached before its first step
        target = self.targets.get(optimizer)
        if target is not None and not target.manual and not target.ready:
            self.pre_step(optimizer)

    @guarded
    def on_clip(self, kind: str, threshold: float, measured: Tensor, norm_type: float) -> None:
        if not self.run.closed and isinstance(measured, Tensor):
            self.clipping.clipped(kind, threshold, measured, norm_type)

    @guarded
    def after_scaler_step(self, optimizer: Optimizer) -> None:
        """A GradScaler that found an inf/NaN gradient did not call ``optimizer.step()``:
        the step ends here, without an update (the statistics were read at its
        ``unscale_``)."""
        target = self.targets.get(optimizer)
        if target is None or not target.ready or self.run.closed:
            return
        target.before = None  # no update was made: not a tiny one
        if self.clipping.scaler_skipped():
            self.run.event(
                EventKind.SCALER_SKIPPED, "the GradScaler skipped this step (inf/NaN gradients)"
            )
        self.post_step(optimizer)

    def after_backward(self, tensors: Any, inputs: Any, grads: Any, direct: bool) -> None:
        if direct:
            self.manual.after_backward(grads)
            self.loss.graph_gradients(grads)  # autograd.grad's: a penalty's, watched

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
        wrapped = _read_after_first_call(self, optimizer, closure, attach)
        if "closure" in kwargs:
            return args, {**kwargs, "closure": wrapped}
        return (args[0], wrapped, *args[2:]), kwargs

    @guarded
    @without_grad
    def pre_step(self, optimizer: Optimizer) -> None:
        target = self.targets.get(optimizer)
        if target is not None and not target.ready:  # not read at a clip or unscale_
            self.statistics(target)

    def statistics(self, target: WatchedOptimizer) -> None:
        primary = target.optimizer is self.primary
        if primary and self.resumption is not None:  # the segment's first step
            self.count = target.steps = self.resumption.start(target.optimizer)  # loaded now
            self.resumption.begin(self.count)
            self.resumption = None
        target.ready = True
        self.locator.pause()
        want_grads = self.reads_grads(target.steps)
        timed = self.cadence if primary and self.cadence and self.cadence.timing() else None
        began = time.perf_counter() if timed else 0.0
        if target.collect(want_grads, self.config.params(target.steps), self.device):
            self.locator.done = True  # sharded (FSDP2): a replay on one rank would hang
        if timed:  # the reads a lean step goes without: this, and the vitals' (``decided``)
            timed.collected(time.perf_counter() - began, self.config.params(target.steps))
        if primary:
            self._clearing.at_statistics(target, self.loss.backward_calls, self.count)
        for at_statistics in self.points.at_statistics:
            at_statistics(target, primary)
        if primary:
            self.lengths.take(target.steps)
        if self.checks_now():
            self.checks.vet(target, primary)
        elif primary:  # read later: what a replay of this step would need is kept
            self.locator.keep(target.steps, self.config.flush_every_steps + 8)
        for after_statistics in self.points.after_statistics:
            after_statistics(target, primary)
        if target.manual:  # the next forward comes before the next backward: arm now
            self.locator.after_step()
        if primary:
            for listener in self.listeners:
                listener("stats", self.count)

    def reads_grads(self, step: int) -> bool:
        """Whether ``step``'s gradients are read (a guard: every step's), once a step."""
        asked, reads = self._reads
        if asked != step:
            reads = self.config.grads(step) or self.checks.guard_asked()
            self._reads = (step, reads)
        return reads

    # -- the step's end -------------------------------------------------------------------
    @guarded
    @without_grad
    def post_step(self, optimizer: Any, *hooked: Any) -> None:  # hooked: the step's arguments
        taps.reading_items(True)
        target = self.targets.get(optimizer)
        if target is None:
            return
        target.stepped(self.device)
        target.ready = False
        if self.guard is not None:
            self.guard.stepped(optimizer)
        calls, micros = self.loss.backward_calls, self.loss.take()
        micros = self.loss.step_ended(target, micros, self)  # whose losses, what they show
        self.loss.credit(micros, self.objectives, optimizer, self.count)
        if optimizer is not self.primary:
            return
        self._clearing.after_step(target)
        loss, divisors = losses.step_values(micros) if micros else self.loss.missed(calls)
        lrs = [] if target.manual else [lr_of(g) for g in target.optimizer.param_groups]
        samples = self.watched.samples or None
        t = time.monotonic() - self.run.t0
        row = StepRow(self.count, t, calls, samples, lrs, loss, divisors, self.clipping.take())
        # several optimizers: a forward before another's step feeds the next loss
        self.watched.forward_seen = self.several and self.watched.forward_seen
        self.watched.samples = 0
        self.transfers.step_ended(row)
        for end_step in self.points.end_step:
            end_step(self.count, self.activations.armed)
        self.count += 1
        self.activations.arm(self.activations.wanted(self.count))
        if not target.manual:
            self.locator.after_step()
        for listener in self.listeners:
            listener("end", self.count - 1)

    @property
    def last_loss(self) -> tuple[int, float] | None:
        """The newest step whose loss reached the host, and that loss (see ``transfers``)."""
        return self.transfers.last_loss

    def checks_now(self) -> bool:
        return self.transfers.checks_now()

    def close(self) -> JsonObject:
        """The last step ends (a program without an optimizer ends one here), the probes
        close; what they leave for the run log's ``meta``."""
        if self.manual.open:
            self.manual.end(None)
        self.loss.close(self.count)  # backpropagated, but the step never ended: not a step's
        self.activations.arm(False)
        self.transfers.send_last()  # what waits reaches the host before the probes sum up
        meta: JsonObject = self.clipping.meta() | self.loss.unread_meta()
        meta |= self._clearing.summary()
        for probe in self.probes:
            meta |= probe.close(self.count)
        return meta | eps_shares(self.targets.values(), self.count)


def _said(origin: Origin) -> str:
    """An origin in the event's one line."""
    where = f" in {module_label(origin.module)}" if origin.module is not None else ""
    at = f" ({origin.file}:{origin.line})" if origin.file else ""
    return f"{origin.phase}: {origin.op}{where}{at}"


def _read_after_first_call(
    steps: Steps,
    optimizer: Optimizer,
    closure: Callable[[], Any],
    attach: Callable[[], None] | None,
) -> Callable[[], Any]:
    """The closure of a step (LBFGS), wrapped: the step's statistics are read after its
    first call, when the gradients exist; a replay of the step calls it again. The optimizer
    calls it: an entry point, whose every call makes the program's own exactly once."""
    called = [False]

    def make(call: Callable[[], Any]) -> Callable[[], Any]:
        def first_call_read() -> Any:
            if called[0] or steps.run.closed:
                return call()
            called[0] = True
            rng = rng_state()
            result = call()
            if attach is not None:
                attach()
            steps.rerun = (closure, rng)  # a replay of this step calls it again, traced
            try:
                steps.pre_step(optimizer)
            finally:
                steps.rerun = None
            steps.loss.closure_open = True  # its next calls' losses are not the step's
            return result

        return first_call_read

    return functools.wraps(closure)(entry.wrapped(closure, make, CLOSURE))


CLOSURE = "collect.step.protocol.closure"
"""The entry's name of a step's closure, wrapped (``_util.entry``)."""


def _holding(targets: IdMap[Optimizer, WatchedOptimizer], params: list[Tensor]) -> Optimizer | None:
    """The optimizer of the clipped parameters: the watched one holding the first of them
    (no pass over every tensor on a step), else any live one."""
    if not params:
        return None
    for optimizer, target in targets.items():
        if not target.manual and id(params[0]) in target.ids():
            return optimizer
    return taps.optimizer_of(params[:1])


def _one(tensors: Any) -> Any:
    """``backward()``'s first argument as one tensor when it is one."""
    if isinstance(tensors, (list, tuple)) and len(tensors) == 1:
        return tensors[0]
    return tensors


def _described(optimizer: Any) -> JsonObject:
    """An optimizer's type and first group's settings, for the run log's ``meta``."""
    group = optimizer.param_groups[0] if optimizer.param_groups else {}
    said: JsonObject = {"type": type(optimizer).__name__, "groups": len(optimizer.param_groups)}
    for key in ("lr", "momentum", "betas", "eps", "weight_decay"):
        value = group.get(key)
        if isinstance(value, Tensor):
            continue  # a capturable optimizer's tensor: not read here
        if isinstance(value, (int, float, tuple, list)) and not isinstance(value, bool):
            said[key] = list(value) if isinstance(value, tuple) else value
    return said


def _born(optimizer: Any) -> JsonObject:
    """``{"at": ...}``: where the program constructed the optimizer, when the taps saw it."""
    at = taps.born_at(optimizer)
    return {"at": at} if at else {}
