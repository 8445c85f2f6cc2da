"""Configuration of a watched run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields

import torch.nn as nn

from .schedule import Schedule, as_schedule, every


@dataclass(kw_only=True, slots=True)
class WatchConfig:
    """What to collect, how often, and how the run log is written.

    Defaults are chosen to cost at most a few percent of a step (see
    ``benchmarks/overhead.py``): gradient norms every step, weights, updates and
    activations every 10 steps.
    """

    grads: Schedule = field(default_factory=lambda: every(1))
    """Per-parameter gradient L2 norm and non-finite count; the global norm."""
    params: Schedule = field(default_factory=lambda: every(10))
    """Per-parameter gradient max-abs, weight norm (before the step) and update norm."""
    activations: Schedule = field(default_factory=lambda: every(10))
    """Per-module output statistics, hooked only on these steps."""
    modules: Callable[[str, nn.Module], bool] | None = None
    """Which modules' outputs to watch (name, module) -> bool; default: all but containers
    and dropout."""
    locate: bool = True
    """On the first non-finite step, replay it to find the op, module and line it came from."""
    skip_nonfinite_updates: bool = True
    """Do not apply an update whose gradients are non-finite (the report counts them)."""
    flush_every_s: float = 1.0
    """Commit the run log at least this often (the most a ``kill -9`` can lose)."""
    flush_every_steps: int = 50
    """... or after this many steps, whichever comes first."""
    queue_size: int = 256
    """Steps waiting for the writer; when full, training waits (bounded memory)."""
    keep_recent_steps: int = 2000
    """Per-layer rows of the most recent steps are always kept at full resolution."""
    keep_old_steps: int = 2000
    """Older per-layer rows are thinned to about this many evenly spaced steps."""

    def __post_init__(self) -> None:
        for name in ("grads", "params", "activations"):
            setattr(self, name, as_schedule(getattr(self, name)))
        if self.flush_every_s <= 0 or self.flush_every_steps < 1:
            raise ValueError("flush_every_s must be > 0 and flush_every_steps >= 1")
        if self.queue_size < 1:
            raise ValueError("queue_size must be >= 1")
        if self.keep_recent_steps < 1 or self.keep_old_steps < 1:
            raise ValueError("keep_recent_steps and keep_old_steps must be >= 1")

    def describe(self) -> dict[str, str]:
        """A JSON-friendly view for the run metadata."""
        return {f.name: repr(getattr(self, f.name)) for f in fields(self)}
