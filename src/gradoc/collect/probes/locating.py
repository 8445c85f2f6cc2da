"""The collector's side of locate: keep what a replay needs, notice the first bad step.

Per forward of a watched model it keeps references to the inputs, the CPU RNG state and
(through a hook on the output) the gradient that reaches the output: no copies, no
per-op work. When a step's loss or gradient norms are non-finite it asks ``locate`` to
replay that step; when the model replays clean, the value was born outside it (the loss
in the training loop) and the next steps are traced whole until it recurs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from ..._util import entry
from ..._util.state import RngState, rng_state
from ...locate import (
    ArmedTrace,
    Birth,
    Origin,
    check_weights,
    locate_step,
    origin_from,
    origin_in_graph,
)
from ..attach import taps
from ..graph import losses


def first_tensor(output: Any) -> Tensor | None:
    """The tensor a module returned, or the first of a tuple/list it returned."""
    if isinstance(output, Tensor):
        return output
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], Tensor):
        return output[0]
    return None


GRAPH_WALKS = 3
"""Non-finite losses whose autograd graph is read, at most (a run that keeps making them,
its steps skipped by a guard, is not walked each step)."""

ARMED_STEPS = 20
"""How many steps to trace whole, waiting for a value born outside the model to recur."""


@dataclass(slots=True)
class _Forward:
    root: nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    rng: RngState
    out_grad: list[Any] = field(default_factory=list)
    """What the backward computed for the output (``entry.gradients_into``)."""
    out_at: int | None = None
    """Where the output's gradient lies in what ``out_grad`` holds (None: it is held itself)."""
    output: Tensor | None = None

    def output_gradient(self) -> Tensor | None:
        """The gradient that reached the output in the step's backward, if it was kept."""
        if not self.out_grad:
            return None
        got = self.out_grad[0] if self.out_at is None else self.out_grad[0][self.out_at]
        return got.detach() if isinstance(got, Tensor) else None


def _placed(origin: Origin) -> bool:
    """The origin names an operation or a line, or needs none (the inputs, the weights)."""
    return bool(origin.op or origin.file) or origin.phase in ("input", "optimizer")


def _made_before(replayed: Origin, in_graph: Origin) -> bool:
    """A replay found a model's input already non-finite where the loss's graph found the op
    that made it (an embedding pooled by the program's own division before a head): the op
    is the birth, the input only carried it."""
    return replayed.phase == "input" and bool(in_graph.op) and in_graph.mechanism is not None


class Locator:
    def __init__(self, names: Mapping[nn.Module, str]) -> None:
        self.names = names
        self.done = False
        self._forwards: list[_Forward] = []
        self.armed = ArmedTrace(names)
        self.armed_left = 0
        self.armed_from: int | None = None
        self.armed_found: Birth | None = None
        self.replaying = False
        """True while a step is replayed: the run's own hooks must not see the replay."""
        self.in_graph: Origin | None = None
        """Where the open step's non-finite loss was born, read from its graph at backward()."""
        self.graph_walks = 0
        self.recent: dict[int, list[_Forward]] = {}
        """Steps whose vitals are read later (an accelerator's, see ``steps``): their
        forwards, kept until their statistics are read."""

    # -- per forward (cheap) ---------------------------------------------------------------
    def on_forward(
        self,
        root: nn.Module,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        rng: RngState | None = None,
    ) -> None:
        """A forward of a watched model: its inputs and the RNG state from before it."""
        if not self.done:
            rng = rng if rng is not None else rng_state()
            self._forwards.append(_Forward(root, args, kwargs, rng))

    def on_output(self, root: nn.Module, output: Any, backward: bool = True) -> None:
        """A forward's output (``backward``: the gradient reaching it is kept, for a replay
        of the step's backward)."""
        if self.done or not self._forwards:
            return
        record = self._forwards[-1]
        out = first_tensor(output)
        if out is not None:
            record.output = out.detach()  # shares storage: no copy, no graph kept
            if backward and out.requires_grad:
                record.out_at = entry.gradients_into(out, record.out_grad)

    def on_loss(self, loss: Tensor, micro: losses.Micro, step: int) -> None:
        """A scalar loss handed to ``backward()`` (``micro``: its value detached, scaling
        undone). On the CPU, where reading it is no synchronisation (~0.2 us), a non-finite
        one has its graph read now, before the backward frees what it saved (the value read
        stays with it: the step's vitals read it no more). On an accelerator the read would
        wait for the device every step: the replay locates instead."""
        if self.done or self.in_graph is not None or not micro.value.is_cpu:
            return
        if micro.host is None:
            micro.host = taps.raw_item(micro.value)
        if math.isfinite(micro.host) or self.graph_walks >= GRAPH_WALKS:
            return
        self.graph_walks += 1
        self.replaying = True  # the walk's own ops are gradoc's
        try:
            self.in_graph = origin_in_graph(loss, step)
        except Exception:  # a graph it cannot read: the replay and the trace still locate
            self.graph_walks = GRAPH_WALKS
        finally:
            self.replaying = False

    # -- per step ---------------------------------------------------------------------------
    def step(
        self,
        step: int,
        bad: bool,
        loss_bad: bool,
        params: Sequence[tuple[str, str, Tensor]],
        last_update: dict[str, float],
        update_ratios: dict[str, tuple[int, float]] | None = None,
        rerun: Callable[[], Origin | None] | None = None,
        optimizer: torch.optim.Optimizer | None = None,
        updated: bool = False,
        late: Origin | None = None,
    ) -> Origin | None:
        """At the optimizer's pre-step of a step known to be ``bad`` or not: find the origin.
        ``late``: the step before's unread gradients were non-finite (a lean step): where
        the weights it wrote are non-finite, the birth is that step's backward.
        ``rerun``: call the step's closure again, traced (a closure computes the loss).
        ``updated``: the weights are already this step's update's (a hand-written step): the
        loss's graph, read before that update, comes first."""
        in_graph, self.in_graph = self.in_graph, None
        try:
            if self.done:
                return None
            found = self.armed_found
            self.armed_found = None
            if found is not None and check_weights(step, params, {}) is not None:
                # the update before wrote non-finite weights (a hand-written update is never
                # skipped): what the trace saw is their consequence, not the birth
                self.done = True
                return None
            if found is not None:
                return self._finish(self._from_armed(step, found))
            if not bad:
                if self.armed_left:
                    self.armed_left -= 1
                    if not self.armed_left:
                        self.done = True  # it never recurred: give up quietly
                return None
            if self.armed_from is not None:  # bad again, but the armed trace missed it
                self.done = True
                return None
            forwards, self._forwards = self._forwards, []
            if in_graph is not None and updated:  # read before the update, which wrote from it
                return self._finish(in_graph)
            origin = check_weights(step, params, last_update, update_ratios or {}, optimizer)
            if late is not None and origin is not None and origin.phase == "optimizer":
                return self._finish(late)  # the update only carried what the backward made
            origin = origin or self._replay(step, forwards, loss_bad)
            if in_graph is not None and origin is not None and _made_before(origin, in_graph):
                origin = in_graph  # the model's input was made by the program's own op
            if in_graph is not None and (origin is None or not _placed(origin)):
                # born outside the model: its graph says where; a trace armed over the next
                # steps would give the aten op and its line if it recurs
                return self._arm(step, in_graph)
            if rerun is not None and (origin is None or not origin.op):
                self.replaying = True
                try:
                    origin = rerun() or origin
                finally:
                    self.replaying = False
            if origin is not None and (origin.op or origin.phase in ("input", "optimizer")):
                return self._finish(origin)
            # born outside the model (the loss, or the loss's backward): trace whole steps
            if origin is not None:  # what the replay could tell, until the trace knows more
                return self._arm(step, origin)
            self.armed_left, self.armed_from = ARMED_STEPS, step
            if loss_bad and forwards:  # the model's output was finite, the loss was not
                return Origin(
                    phase="forward",
                    step=step,
                    module=None,
                    note="the model's output was finite but the loss computed from it in the "
                    "training loop was not: born outside the model; tracing is armed to "
                    "catch the operation on its next occurrence",
                )
            return None
        finally:
            self._forwards = []

    def keep(self, step: int, limit: int) -> None:
        """The statistics point of a step read later: keep its forwards (the last ``limit``
        steps'), so that the step can be replayed when it turns out non-finite."""
        if self.done:
            self.recent.clear()
            return
        self.recent[step], self._forwards = self._forwards, []
        while len(self.recent) > limit:
            del self.recent[next(iter(self.recent))]

    def read(self, step: int) -> None:
        """A step read later came back finite: its forwards are not needed."""
        for kept in [k for k in self.recent if k <= step]:
            del self.recent[kept]

    def late(
        self,
        step: int,
        now: int,
        loss_bad: bool,
        params: Sequence[tuple[str, str, Tensor]],
    ) -> Origin | None:
        """Step ``step`` was non-finite, read at step ``now`` (its update is made): replay
        its forwards on the weights as they are now when they are finite (the value is born
        of the step's inputs), else say that it could not be replayed."""
        forwards = self.recent.pop(step, [])
        self.recent.clear()
        if self.done:
            return None
        read = (
            f"read at step {now}: on an accelerator the statistics are read behind the "
            "device's work, without waiting for it"
        )
        if check_weights(step, params, {}) is not None:
            self.done = True
            return Origin(
                phase="forward" if loss_bad else "backward",
                step=step,
                module=None,
                note=f"the first non-finite step was {step}, {read}; its update had written "
                "non-finite weights by then, so it could not be replayed "
                "(skip_nonfinite_updates=True reads each step before its update)",
            )
        origin = self._replay(step, forwards, loss_bad)
        if origin is None:
            return None
        origin.note = (origin.note + "; " if origin.note else "") + (
            f"{read}; replayed from its inputs on the weights of step {now}"
        )
        return self._finish(origin)

    def pause(self) -> None:
        """At the start of the optimizer's pre-step: stop the armed trace (if any)."""
        if self.armed.active:
            self.armed_found = self.armed.stop()

    def after_step(self) -> None:
        """At the optimizer's post-step: arm the trace over the whole next iteration."""
        if self.armed_left and not self.done:
            self.armed.start()

    def _arm(self, step: int, origin: Origin) -> Origin:
        """Trace whole steps from now, waiting for the value to recur; ``origin`` is what is
        known until then."""
        self.armed_left, self.armed_from = ARMED_STEPS, step
        origin.note = (origin.note or "") + (
            "; tracing is armed to catch the operation on its next occurrence"
        )
        return origin

    def _finish(self, origin: Origin) -> Origin:
        self.done = True
        return origin

    def _from_armed(self, step: int, found: Birth) -> Origin:
        origin = origin_from(step, found)
        origin.note = (
            f"the model replayed clean at step {self.armed_from}, so the value was born "
            f"outside it; caught at step {step}, its next occurrence, with tracing armed"
        )
        return origin

    def _replay(
        self, step: int, forwards: list[_Forward], loss_bad: bool, only_nonfinite: bool = False
    ) -> Origin | None:
        """Replay the recorded forwards of ``step`` until one shows where the value was born
        (``only_nonfinite``: skip forwards whose output was finite)."""
        self.replaying = True
        try:
            for fwd in forwards:
                if only_nonfinite and (
                    fwd.output is None or bool(torch.isfinite(fwd.output).all())
                ):
                    continue
                out_grad = fwd.output_gradient()
                origin = locate_step(
                    step,
                    [fwd.root],
                    self.names,
                    (fwd.args, fwd.kwargs),
                    fwd.rng,
                    out_grad,
                    loss_bad,
                )
                if origin is not None:
                    return origin
        finally:
            self.replaying = False
        return None

    def close(self, step: int) -> Origin | None:
        """At the end of the run. A script that stopped in the middle of a step (``if
        torch.isnan(loss): sys.exit()``) left that step's forward unreplayed: replay it now.
        An armed trace that saw the birth before the end reports it too."""
        found = self.armed.stop() if self.armed.active else None
        if self.done:
            return None
        if found is not None:
            return self._finish(self._from_armed(step, found))
        forwards, self._forwards = self._forwards, []
        # a healthy last forward (the loop simply ended) costs no replay
        origin = self._replay(step, forwards, loss_bad=False, only_nonfinite=True)
        if origin is None:
            return None
        origin.note = (
            f"the script stopped during step {step}, before its optimizer step; "
            "gradoc replayed that step's forward at the end of the run"
        )
        return self._finish(origin)
