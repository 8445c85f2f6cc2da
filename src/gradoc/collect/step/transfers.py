"""The steps' statistics on their way to the run log: one packet (see ``packet``) every
few steps, read at once on the CPU and behind the device's work on an accelerator.

How often: every ``flush_every_steps`` steps where each step's vitals are read at its
statistics point (the CPU, a guard); elsewhere every few steps, chosen so that a transfer
costs under 1% of the steps it carries (at most ``flush_every_steps``); at least every
``flush_every_s`` either way. A step's vitals are read at its statistics point where that
costs no waiting (:meth:`Transfers.checks_now`);
elsewhere they travel with its statistics, and the first non-finite one found there is
located late (:meth:`Transfers.read_later`), every later step then read at once.
"""

from __future__ import annotations

import math
import sys
import time
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch
from torch import Tensor
from torch.optim import Optimizer

from ..._util.text import safe
from ..probes import received_counts
from .packet import Packet
from .record import Layout, StepRecord, StepRow

if TYPE_CHECKING:
    from ..._util.objects import IdMap
    from ...guard import Guard
    from ..context import Internal
    from ..probe import Points, Probe
    from ..probes import Activations, Calls, Lengths, WatchedOptimizer
    from .loss_reading import LossReader
    from .objectives import Objectives


class Stepping(Protocol):
    """What the transfers read of the run's steps."""

    count: int
    primary: Optimizer | None
    device: torch.device | None
    targets: IdMap[Optimizer, WatchedOptimizer]
    activations: Activations
    lengths: Lengths
    loss: LossReader
    objectives: Objectives
    probes: list[Probe]
    points: Points
    guard: Guard | None


class Transfers:
    def __init__(self, run: Internal, steps: Stepping) -> None:
        self.run, self.steps, self.config = run, steps, run.config
        self.packet = Packet()
        """The device tensors waiting for the step's one host read (see ``packet``)."""
        self.pending: list[StepRow] = []
        self._acts: list[tuple[int, dict[int, Calls]]] = []
        """Activation steps' statistics in the packet: (step, where they lie)."""
        self._last = time.monotonic()
        self._every = 1
        """Steps per transfer (see :meth:`send`)."""
        self._step_at: float | None = None
        self._step_s = 0.0
        """A running mean of the step's duration (seconds)."""
        self.bad = False
        """The step's vitals came back non-finite: its statistics travel at its end."""
        self.synced = False
        """A step read later was non-finite: every step is read at once from then on."""
        self._seen_nonfinite: set[str] = set()
        self.last_loss: tuple[int, float] | None = None
        """The newest step whose loss reached the host, and that loss, kept when some probe
        ``wants_loss`` (a status line's)."""
        self._keep_loss = any(p.wants_loss for p in steps.probes)
        self._now: bool | None = None
        """Whether each step's vitals are read at its statistics point (:meth:`checks_now`),
        once the device is known."""

    def step_ended(self, row: StepRow) -> None:
        """The primary optimizer's step ended: its row waits, and travels when it is time."""
        self.pending.append(row)
        self.pack_activations()  # this step's outputs, packed now, read later
        now = time.monotonic()
        if self._step_at is not None:
            self._step_s += (now - self._step_at - self._step_s) / 8  # a running mean
        self._step_at = now
        if not self.checks_now():
            self.packet.poll()  # what arrived from the device (no waiting)
        due = len(self.pending) >= self._every or now - self._last >= self.config.flush_every_s
        if self.bad or due:
            self.bad = False
            self.send()

    def checks_now(self) -> bool:
        """Each step's vitals are read at its statistics point: on the CPU, where a read
        is no synchronisation (a few scalars, ~5 us), wherever the guard decides before the
        update, and once a step read later was non-finite. Elsewhere (an accelerator) a
        step's vitals travel with its statistics, read behind the device's work: no step
        waits for the device."""
        now = self._now
        if now is None:  # decided once the device is known (it runs several times a step)
            device = self.steps.device
            if device is None:
                return True
            now = self._now = self.steps.guard is not None or device.type == "cpu"
        return now or self.synced

    def pack_activations(self) -> None:
        """The current step's module outputs, if it sampled any, into the packet."""
        activations = self.steps.activations
        if activations.waiting():
            self._acts.append((self.steps.count, activations.pack(self.packet)))

    def _transfer(self) -> None:
        """Add the waiting steps' statistics and losses to the packet; their rows are made
        when it is read (see :meth:`send`)."""
        pack, steps = self.packet, self.steps
        rows = _loss_rows(pack, self.pending)
        clips = {k: pack.add(r.clip[1]) for k, r in enumerate(self.pending) if r.clip is not None}
        unused = [
            (u, pack.add(u.value) if isinstance(u.value, Tensor) else None)
            for u in steps.loss.unbacked.take()
        ]
        lrs = {
            (k, i): pack.add(lr)
            for k, r in enumerate(self.pending)
            for i, lr in enumerate(r.lrs)
            if isinstance(lr, Tensor)
        }
        objectives = [(step, k, pack.add(v)) for step, k, v in steps.objectives.take()]
        entropies = [(step, k, pack.add(v)) for step, k, v in steps.loss.take_entropies()]
        attention = [(step, site, pack.add(v)) for step, site, v in steps.loss.take_attention()]
        outputs = [(step, site, pack.add(v)) for step, site, v in steps.loss.take_outputs()]
        targets = [
            sl
            for t in steps.targets.values()
            if t.collected()
            for sl in t.slices(pack, t.optimizer is steps.primary)
        ]
        self.pack_activations()
        steps.lengths.pack(pack)
        later = not self.checks_now()
        layout = Layout(
            steps.count,
            rows,
            lrs,
            targets,
            self._acts,
            clips,
            unused,
            objectives,
            later,
            entropies,
            attention,
            outputs,
        )
        self.pending, self._acts = [], []
        self._last = time.monotonic()
        pack.on_read(lambda host: self._received(host, layout))

    def _received(self, host: Tensor, layout: Layout) -> None:
        """A transfer's statistics reached the host: hand them to the writer thread."""
        counts: dict[tuple[int, int], float] = {}
        fine = np.isfinite(host.numpy())
        finite = bool(fine.all())  # the common case: nothing to count
        if self._keep_loss:
            self.last_loss = layout.newest_loss(host.numpy()) or self.last_loss
        for sl in layout.targets:
            # only an optimizer's own non-finite norms are counted: a sampled step's
            # activation statistics hold NaN by design (a statistic its module lacks)
            if not finite and (sl.counted is not None or _any_bad(fine, sl.norms)):
                counts.update(((sl.step, i), c) for i, c in received_counts(sl, host).items())
            for received in self.steps.points.received:
                received(sl, host)
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
            self.run.locator.read(layout.step)
            return
        first = min(bad)
        self.synced = True
        for late in self.steps.points.late:
            late(first, self.steps.count, bad[first])

    def _collected(self) -> bool:
        return (
            bool(self._acts)
            or self.steps.activations.waiting()
            or any(t.collected() for t in self.steps.targets.values())
        )

    def _to_transfer(self) -> bool:
        steps = self.steps
        return (
            bool(self.pending or steps.loss.unbacked.unused or steps.objectives.pending)
            or bool(steps.loss.entropies or steps.loss.attention or steps.loss.outputs)
            or self._collected()
        )

    def unsent(self) -> bool:
        return self._to_transfer() or len(self.packet) > 0 or self.packet.poll() > 0

    def send(self, wait: bool = False) -> None:
        """Everything collected so far, to the writer thread (one host read): read at once
        (on the CPU, or ``wait``), else sent and read when it arrived (see ``packet``)."""
        t = time.perf_counter()
        if self._to_transfer():
            self._transfer()
        if wait or self.checks_now():
            self.packet.read()
        else:
            self.packet.send()
            self.packet.poll()
        self._every = self._cadence(time.perf_counter() - t)

    def _cadence(self, took: float) -> int:
        """Steps per transfer. Where each step's vitals are read at its statistics point
        (the CPU, a guard), nothing waits for a transfer: ``flush_every_steps`` (the time
        bound ``flush_every_s`` still holds), so that the packet and the writer's rows cost
        a fixed share of a fast step. Elsewhere the packet is how a non-finite step is
        found: enough steps that a transfer costs under 1% of the steps it carries (from
        ``took``, what the last one took), at most ``flush_every_steps``."""
        if self.checks_now():
            return self.config.flush_every_steps
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


def _any_bad(fine: np.ndarray[Any, Any], at: slice | None) -> bool:
    """A value not ``fine`` (finite) where ``at`` lies (None: nothing there)."""
    return at is not None and not fine[at].all()


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
