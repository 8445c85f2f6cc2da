"""The sampled probes' cadence, chosen once per run from its own step time (issue 36).

Gradient norms, the loss and the non-finite checks are read every step. The expensive
statistics (weights and updates, activations) are sampled: with the default
:class:`~gradoc.schedule.budget` schedule, every ``dense`` (10) steps until step ``until``
(200), where early problems show; from there every k-th step, k chosen so that the sampled
steps cost about ``share`` (3%) of the training time.

How k is chosen: the first ``choose_at`` (50) steps are timed, from the end of one step to
the end of the next (the forward, the backward, the update and gradoc's work), the first
left out (warm-up); a resumed run's segment times its own first steps. ``cost`` is the
median sampled step's time less the median plain step's; k is the smallest round number
(10, 20, 50, 100, ... 1,000) with ``cost / k <= share * plain``, and never below ``dense``.
Once chosen, k is fixed: which steps are sampled never depends on later timing (a replay
samples the same steps given the same k). The choice, its inputs and the steps it applies
from are ``meta['sampling']`` and the report's ``run.sampling``.

A run whose configuration gives ``params`` or ``activations`` another schedule (``every(10)``,
``gradoc run --sample-every 10``) keeps that one: nothing is timed.

**The per-step reads on a lean step** (issue 47): the gradients' norms and their host read
are timed too, on the same steps (:meth:`Cadence.collected`, then ``decided``). Where they
take more than their part of the per-step budget (:class:`~gradoc.schedule.lean`: a quarter
of the larger of 3% of the step and 0.1 ms), they are read every ``kg``-th step from
``until`` on (and on every sampled step), ``kg`` the smallest of ``READS_ROUND`` that fits,
fixed and recorded with k (``grads_every``). The loss is still read every step: a NaN/Inf in
it is seen, and located, at its step; a non-finite gradient under a finite loss shows at the
next read, in the next step's loss or in the weights its update wrote.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from typing import TYPE_CHECKING

from ...schedule import budget, lean, lean_reads
from ..probe import ROUND, Probe

if TYPE_CHECKING:
    from ...guard import Vitals
    from ..context import Internal
    from ..probes import WatchedOptimizer


READS_ROUND = (2, 5, *ROUND)
"""The cadences the per-step reads may take on steps too short for them."""


class Cadence(Probe):
    """One run's budgeted schedule (:meth:`sampled`), and the timing that chooses it."""

    def __init__(self, run: Internal, spec: budget) -> None:
        self.run, self.spec = run, spec
        self.k: int | None = None
        """The cadence from ``spec.until`` on, once chosen."""
        self._last: float | None = None
        self._seen = 0
        self._plain: list[float] = []
        self._sampled: list[float] = []
        self.lean: lean | None = None
        """The per-step reads' budget, when the gradients' norms are read on it."""
        self.kg: int | None = None
        """The per-step reads' cadence from ``spec.until`` on, once chosen (1: every step)."""
        self._reads: list[float] = []
        self._read_s: float | None = None
        """The median per-step reads' time the choice was made from."""
        self._collect: float | None = None
        """The step being timed: what reducing its gradients' norms took."""
        self._began = 0.0
        """When the step being timed began its host read (its probes' ``at_statistics``)."""

    @classmethod
    def of(cls, run: Internal) -> Cadence | None:
        """The run's cadence when its configuration samples on a budget: its ``params`` and
        ``activations`` schedules that are :class:`budget` become this run's (one choice for
        both); None otherwise."""
        config = run.config
        specs = {
            k: s for k in ("params", "activations") if isinstance(s := getattr(config, k), budget)
        }
        if not specs:
            return None
        cadence = cls(run, next(iter(specs.values())))
        run.config = own = dataclasses.replace(config)  # the user's config is left as given
        for name in specs:
            setattr(own, name, cadence.sampled)
        if isinstance(config.grads, lean):
            cadence.lean = config.grads
            own.grads = cadence.read
        cadence.record()
        return cadence

    def sampled(self, step: int) -> bool:
        """The schedule: every ``dense`` steps, then every k-th from ``until`` on."""
        k = self.k
        if k is None or step < self.spec.until:
            return step % self.spec.dense == 0
        return step % k == 0

    def read(self, step: int) -> bool:
        """The per-step reads' schedule: every step, or (steps too short for them) every
        ``kg``-th from ``until`` on and on every sampled step."""
        return lean_reads(step, self.spec.until, self.kg, self.k)

    def timing(self) -> bool:
        """The steps are still being timed (nothing chosen yet)."""
        return self.k is None and self.lean is not None

    def collected(self, seconds: float, sampled: bool) -> None:
        """A timed step's gradients' norms took ``seconds`` to reduce; their host read, with
        the loss, comes at ``decided`` (a sampled step's reads are not a plain step's)."""
        self._collect = None if sampled else seconds

    def at_statistics(self, target: WatchedOptimizer, primary: bool) -> None:
        if primary and self._collect is not None:
            self._began = time.perf_counter()  # the other probes' work is not the reads'

    def decided(self, target: WatchedOptimizer, vitals: Vitals) -> None:
        if self._collect is not None:  # set by the primary optimizer's collect, just before
            self._reads.append(self._collect + time.perf_counter() - self._began)
            self._collect = None

    def end_step(self, step: int, activations_seen: bool) -> None:
        if self.k is not None:
            return
        now = time.perf_counter()
        last, self._last = self._last, now
        self._seen += 1  # steps of this process: a resumed run's segment times its own
        if last is None:
            return  # the first step carries the warm-up
        (self._sampled if step % self.spec.dense == 0 else self._plain).append(now - last)
        if self._seen >= self.spec.choose_at:
            self.choose(step + 1)

    def choose(self, at: int) -> None:
        """Fix k from the steps timed so far, from step ``at`` on, and say so in the log."""
        spec = self.spec
        plain = statistics.median(self._plain) if self._plain else None
        sampled = statistics.median(self._sampled) if self._sampled else None
        k = spec.dense
        if plain and sampled is not None and sampled > plain:
            need = (sampled - plain) / (spec.share * plain)
            k = next((r for r in ROUND if r >= need), ROUND[-1])
            k = max(spec.dense, math.ceil(k / spec.dense) * spec.dense)
        self.k = k
        if self.lean is not None:
            self.kg = 1
            reads = statistics.median(self._reads[1:] or self._reads) if self._reads else None
            allowed = self.lean.budget_s(plain) if plain else None
            if self.lean.every is not None:
                self.kg = self.lean.every  # as asked
            elif allowed and reads is not None and reads > allowed:
                self.kg = next((r for r in READS_ROUND if r >= reads / allowed), READS_ROUND[-1])
            self._read_s = reads
        self.record(plain, sampled, at)

    def record(
        self, plain: float | None = None, sampled: float | None = None, at: int | None = None
    ) -> None:
        """``meta['sampling']``: the budget, and k once chosen (``every``: None until then)."""
        spec = self.spec
        self.run.set_meta(
            sampling={
                "every": self.k,
                "from": spec.until,
                "before": spec.dense,
                "chosen_at": spec.choose_at if at is None else at,
                "step_ms": None if plain is None else round(plain * 1e3, 4),
                "sampled_step_ms": None if sampled is None else round(sampled * 1e3, 4),
                "share": spec.share,
                **self._reads_meta(plain),
            }
        )

    def _reads_meta(self, plain: float | None) -> dict[str, float | int | None]:
        """The per-step reads' cadence (``grads_every``: 1, every step), what they took and
        their budget, once chosen; nothing where the gradients keep a schedule of their own."""
        if self.lean is None:
            return {}
        reads = self._read_s
        return {
            "grads_every": self.kg,
            "reads_ms": None if reads is None else round(reads * 1e3, 4),
            "reads_budget_ms": None if plain is None else round(self.lean.budget_s(plain) * 1e3, 4),
            **({"grads_asked": True} if self.lean.every is not None else {}),
        }
