"""The probe protocol: one live statistic, called by the step protocol (see ``steps``).

A probe watches one thing (activations, AMP ranges, sequence lengths, padding, the
origin of a NaN) and does nothing on the steps its schedule leaves out. The step protocol
calls every probe of the run at the same points, in the order they were given; which
probes a run has is decided once, from its configuration (``probes_for``), so the run and
its steps never ask the configuration what to watch.

Points, in the order a step meets them:

- ``on_output``: a watched module returned ``x`` (activation steps only: the hook that
  calls it exists only then);
- ``on_forward``: a watched root's forward returned (``rng``: the RNG state before it,
  kept when some probe ``wants_rng``);
- ``at_statistics``: the step's statistics point, gradients present, before anything is
  decided (the guard may drop the gradients after it);
- ``decided``: once the step's vitals were read at its statistics point (see
  ``Steps.checks_now``);
- ``after_statistics``: once the guard acted;
- ``late``: a step read after its update (an accelerator's, see ``steps``) was non-finite;
- ``received``: an optimizer's statistics reached the host (at the next read);
- ``end_step``: the primary optimizer's step ended;
- ``close``: the run closes; what it returns goes to the run log's ``meta``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch.nn as nn
from torch import Tensor

if TYPE_CHECKING:
    from ..guard import Vitals
    from .attach import WatchedModule
    from .probes import Slices, WatchedOptimizer

from .._util.json_types import JsonObject
from .._util.state import RngState


class Probe:
    wants_rng = False
    """The RNG state before each forward of a watched root is kept for it."""
    wants_loss = False
    """The newest loss that reached the host is kept for it (``Steps.last_loss``)."""

    def on_output(self, watched: WatchedModule, module: nn.Module, x: Tensor) -> None:
        pass

    def on_forward(
        self, root: nn.Module, args: Any, kwargs: Any, output: Any, rng: RngState
    ) -> None:
        pass

    def at_statistics(self, target: WatchedOptimizer, primary: bool) -> None:
        pass

    def decided(self, target: WatchedOptimizer, vitals: Vitals) -> None:
        pass

    def after_statistics(self, target: WatchedOptimizer, primary: bool) -> None:
        pass

    def late(self, step: int, now: int, loss_bad: bool) -> None:
        pass

    def received(self, sl: Slices, host: Tensor) -> None:
        pass

    def end_step(self, step: int, activations_seen: bool) -> None:
        pass

    def close(self, step: int) -> JsonObject:
        return {}


class Points:
    """Each point's methods of the run's probes that do something there, bound once when
    the run's probes are chosen: a step calls only those (a point no probe uses costs it
    nothing, and no probe's empty method is called)."""

    def __init__(self, probes: list[Probe]) -> None:
        self.on_output = _defined(probes, "on_output")
        self.on_forward = _defined(probes, "on_forward")
        self.at_statistics = _defined(probes, "at_statistics")
        self.decided = _defined(probes, "decided")
        self.after_statistics = _defined(probes, "after_statistics")
        self.late = _defined(probes, "late")
        self.received = _defined(probes, "received")
        self.end_step = _defined(probes, "end_step")


def _defined(probes: list[Probe], point: str) -> list[Any]:
    """The bound ``point`` methods of the ``probes`` whose class defines one of its own."""
    empty = getattr(Probe, point)
    return [getattr(p, point) for p in probes if getattr(type(p), point) is not empty]


ROUND = (10, 20, 50, 100, 200, 500, 1000)
"""The periods a sampled probe or graph reader may take (``step.cadence``'s k, the attention
reader's every): round numbers, so that the sampled steps read well."""
