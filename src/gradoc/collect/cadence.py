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
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from typing import TYPE_CHECKING

from ..schedule import budget
from .probe import Probe

if TYPE_CHECKING:
    from .context import Internal

ROUND = (10, 20, 50, 100, 200, 500, 1000)
"""The cadences k may take: round numbers, so that the sampled steps read well."""


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
        cadence.record()
        return cadence

    def sampled(self, step: int) -> bool:
        """The schedule: every ``dense`` steps, then every k-th from ``until`` on."""
        k = self.k
        if k is None or step < self.spec.until:
            return step % self.spec.dense == 0
        return step % k == 0

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
            }
        )
