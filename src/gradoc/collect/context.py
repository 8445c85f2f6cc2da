"""What the run's parts may use of it: a probe's :class:`Context`, the step protocol's
:class:`Internal`.

A probe (``probe``) is handed a ``Context``: the run's events and metadata, its locator,
and read-only views of its steps and watched modules, nothing else. The run's own parts
(``steps``, ``watched``, ``manual``) get an ``Internal`` view, a little more. Both are
protocols that
:class:`~gradoc.collect.run.Run` satisfies (mypy checks it where the run hands itself
over): they name what a part may touch, cost no indirection on a step's path, and keep
these modules from importing ``run`` (no import circle: ``tests/test_layers.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import torch.nn as nn
from torch.optim import Optimizer

if TYPE_CHECKING:
    from pathlib import Path

    from .._util.objects import IdMap
    from .._util.state import RngState
    from ..config import WatchConfig
    from ..guard import Guard
    from ..locate import Origin
    from ..store import EventKind
    from ..store.writer import Write
    from .attach import WatchedModule
    from .probe import Points
    from .probes import Locator, WatchedOptimizer


class StepsView(Protocol):
    """The run's steps, as a probe reads them."""

    count: int
    """Steps completed so far."""
    targets: IdMap[Optimizer, WatchedOptimizer]
    """The watched optimizers' parameters and statistics."""
    rerun: tuple[Callable[[], Any], RngState] | None
    """A step given a closure, while its statistics are read: what replays it."""

    @property
    def last_loss(self) -> tuple[int, float] | None:
        """The newest step whose loss reached the host, and that loss."""

    def reads_grads(self, step: int) -> bool:
        """Whether ``step``'s gradients are read at its statistics point (a lean step's are
        not, see ``cadence``)."""


class WatchedView(Protocol):
    """The run's watched modules, as a probe reads them."""

    modules: IdMap[nn.Module, WatchedModule]
    names: IdMap[nn.Module, str]
    prefixes: IdMap[nn.Module, str]
    """Watched roots and their name prefixes."""
    last_forward: tuple[nn.Module, Any, Any] | None
    """The last forward of a watched root: the module, its args and kwargs."""


class Context(Protocol):
    """What a probe may use of its run."""

    broken: bool
    """The run stopped collecting after an internal error."""

    @property
    def locator(self) -> Locator: ...

    @property
    def steps(self) -> StepsView: ...

    @property
    def watched(self) -> WatchedView: ...

    def event(self, kind: EventKind, message: str, step: int | None = None, **data: Any) -> None:
        """Log an event to the run log."""

    def set_meta(self, **items: Any) -> None:
        """Merge ``items`` into the run log's ``meta``."""

    def record_origin(self, origin: Origin) -> None:
        """A non-finite value's origin was found."""


class InternalActivations(Protocol):
    def adopt(self, modules: IdMap[nn.Module, WatchedModule]) -> None: ...


class InternalSteps(StepsView, Protocol):
    @property
    def activations(self) -> InternalActivations: ...

    def on_forward_output(self, output: Any) -> None: ...


class InternalWatched(WatchedView, Protocol):
    forward_seen: bool
    """A watched root ran forward this step."""
    samples: int
    """The samples the step's forwards held."""
    next_id: int
    """The id the next watched tensor or module gets."""
    points: Points
    """The run's probes' methods at each point of a step, bound once (``probe.Points``)."""

    def roots(self, given: list[nn.Module], several: bool = False) -> list[nn.Module]: ...

    def watch_modules(self, roots: list[nn.Module]) -> None: ...


class Internal(Context, Protocol):
    """What the run's own parts (its steps, watched modules, hand-written steps) use of it."""

    config: WatchConfig
    dir: Path
    """The run directory."""
    closed: bool
    t0: float
    """``time.monotonic()`` when the run started."""
    attach_early: Callable[[Optimizer], None] | None
    find_owners: Callable[[set[int]], list[nn.Module]] | None

    @property
    def guard(self) -> Guard | None: ...

    @property
    def steps(self) -> InternalSteps: ...

    @property
    def watched(self) -> InternalWatched: ...

    def put(self, record: Write, now: bool = False) -> None:
        """Queue a record for the run log's writer."""
