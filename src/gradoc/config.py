"""Configuration of a watched run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import torch.nn as nn

from .schedule import Schedule, as_schedule, budget, lean


@dataclass(kw_only=True, slots=True)
class WatchConfig:
    """What to collect, how often, and how the run log is written.

    Defaults are chosen to cost at most a few percent of a step (see
    ``benchmarks/overhead.py`` and ``benchmarks/tiny.py``): gradient norms every step;
    weights, updates and activations every 10 steps to step 200, then at a cadence chosen
    from the program's measured step time so that they cost about 3% of it
    (:class:`~gradoc.schedule.budget`; ``params=10`` fixes it by hand).
    """

    grads: Schedule = field(default_factory=lean)
    """Per-parameter gradient L2 norm and non-finite count; the global norm. Every step, or on
    steps too short for these reads to fit the budget every k-th from step 200
    (:class:`~gradoc.schedule.lean`); ``grads=1`` reads them every step whatever they cost."""
    params: Schedule = field(default_factory=budget)
    """Per-parameter gradient max-abs, weight norm (before the step) and update norm."""
    activations: Schedule = field(default_factory=budget)
    """Per-module output statistics, hooked only on these steps."""
    activation_modules: int = 100
    """A model with more watched modules than this has its activation steps spaced out (every
    k-th step of ``activations``, k = modules / this, rounded up), so that activation
    statistics cost per step the same for 100 or 10,000 modules; every module is summarised
    on the steps that remain."""
    modules: Callable[[str, nn.Module], bool] | None = None
    """Which modules' outputs to watch (name, module) -> bool; default: all but containers
    and dropout."""
    locate: bool = True
    """On the first non-finite step, replay it to find the op, module and line it came from."""
    skip_nonfinite_updates: bool | None = None
    """``True``: do not apply a step whose loss or gradients are non-finite (the report
    counts them): the guard with skipping as its only action (see :meth:`guard_config`).
    ``None`` (the default): only when a ``guard`` that skips is given. gradoc only
    observes unless a guard is asked for, so a program that fails because of a NaN fails
    the same way, with the same output and exit code, under gradoc."""
    sinks: dict[str, str] = field(default_factory=dict)
    """Where else the run goes at close, ``{"tensorboard": "tb-logs/run1"}`` (see
    :mod:`gradoc.sinks`)."""
    check_amp: bool = False
    """Mixed-precision readiness: on activation and parameter steps, count how module outputs
    and gradients would fare in fp16/bf16 (``gradoc run --check amp``)."""
    check_padding: bool = False
    """Padding audit (``gradoc run --check padding``): on steps 0, 1, 2 and every 200th, when
    the model is called with a padding mask or has an Embedding with a padding_idx, check
    that padded positions do not change the outputs at real ones."""
    guard: GuardConfig | bool | None = None
    """Keep the run alive: skip non-finite steps, clip outlier gradients, roll back
    (``True`` for the defaults of :class:`GuardConfig`)."""
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
    live: bool = True
    """In a Jupyter notebook, a one-line status of the run (step, loss, steps a second) in
    the cell's output while it trains, updated at most once a second; elsewhere nothing."""

    def __post_init__(self) -> None:
        if self.guard is True:
            self.guard = GuardConfig()
        elif self.guard is False:
            self.guard = None
        elif self.guard is not None and not isinstance(self.guard, GuardConfig):
            raise TypeError(f"guard must be True, False or a GuardConfig, not {self.guard!r}")
        guard_skips = isinstance(self.guard, GuardConfig) and self.guard.skip_nonfinite
        if guard_skips and self.skip_nonfinite_updates is False:
            raise ValueError(
                "skip_nonfinite_updates=False contradicts a guard that skips non-finite "
                "steps; use guard=GuardConfig(skip_nonfinite=False)"
            )
        for name in ("grads", "params", "activations"):
            setattr(self, name, as_schedule(getattr(self, name)))
        if self.flush_every_s <= 0 or self.flush_every_steps < 1:
            raise ValueError("flush_every_s must be > 0 and flush_every_steps >= 1")
        if self.activation_modules < 1:
            raise ValueError("activation_modules must be >= 1")
        if self.queue_size < 1:
            raise ValueError("queue_size must be >= 1")
        if self.keep_recent_steps < 1 or self.keep_old_steps < 1:
            raise ValueError("keep_recent_steps and keep_old_steps must be >= 1")

    def guard_config(self) -> GuardConfig | None:
        """What keeps non-finite steps out, one way whichever flag asked: the guard given,
        else (``skip_nonfinite_updates``) a guard that only skips (no clipping, no
        rollback, no agreement across ranks), else none. A skipped step changes no
        weight, momentum or Adam moment, and a per-step LR scheduler does not advance."""
        if isinstance(self.guard, GuardConfig):
            return self.guard
        if self.skip_nonfinite_updates:
            return GuardConfig(skip_nonfinite=True, clip=None, rollback=False, collective=False)
        return None

    def writer_options(self) -> dict[str, Any]:
        """The run log writer's settings (``store.writer.RunWriter``'s keywords)."""
        return {
            "flush_every_s": self.flush_every_s,
            "flush_every_steps": self.flush_every_steps,
            "queue_size": self.queue_size,
            "keep_recent_steps": self.keep_recent_steps,
            "keep_old_steps": self.keep_old_steps,
        }

    def describe(self) -> dict[str, str]:
        """A JSON-friendly view for the run metadata."""
        return {f.name: repr(getattr(self, f.name)) for f in fields(self)}


@dataclass(kw_only=True, slots=True)
class GuardConfig:
    """What the guard does to keep a long run alive (``watch(..., guard=GuardConfig(...))``).

    Every action is logged as an event of the run (``skipped_update``, ``clipped``,
    ``rollback``, ``guard_gave_up``) and counted in the report.
    """

    skip_nonfinite: bool = True
    """A step whose loss or any gradient is NaN/Inf is not applied: no weight, momentum or
    Adam-moment change, and a per-step LR scheduler does not advance."""
    clip: Literal["zclip"] | float | None = "zclip"
    """``"zclip"``: clip the global gradient norm when it is an outlier against its own
    history (ZClip); a number: clip it at that fixed max-norm; ``None``: never clip."""
    zclip_alpha: float = 0.97
    """EMA factor of the norm's mean and variance (ZClip's default)."""
    zclip_z: float = 2.5
    """z-score above which a norm is an outlier (ZClip's default)."""
    zclip_warmup: int = 25
    """Steps whose norms initialise the averages; nothing is clipped before (ZClip's default)."""
    rollback: bool = True
    """Restore the last good snapshot after ``rollback_after`` consecutive non-finite steps
    or a loss divergence, and lower the learning rate."""
    rollback_after: int = 3
    """Consecutive non-finite steps that trigger a rollback."""
    rollback_on_divergence: bool = True
    """Also roll back when the loss diverges (rolling median of ``divergence_window`` steps
    above ``divergence_factor`` x its best, having lost a tenth of the ground gained: the
    ``loss_divergence`` detector's rule)."""
    divergence_window: int = 50
    divergence_factor: float = 2.0
    snapshot_every: int = 100
    """Steps between snapshots of model and optimizer state (taken on healthy steps)."""
    keep_snapshots: int = 2
    """Snapshots kept; memory per snapshot: parameters + buffers + optimizer state."""
    snapshot_device: str | None = None
    """Where snapshots live: ``None`` for the parameters' own device, ``"cpu"`` for host memory."""
    lr_backoff: float = 0.5
    """Learning-rate factor applied at each rollback (schedules included)."""
    max_rollbacks: int = 3
    """After this many rollbacks the next trigger stops training with :class:`GuardGaveUp`."""
    collective: bool | None = None
    """Agree on every decision across ranks (an all-reduce of the step's flags and norm);
    ``None``: when ``torch.distributed`` is initialised with more than one rank."""

    def __post_init__(self) -> None:
        if self.clip is not None and self.clip != "zclip":
            if isinstance(self.clip, bool) or not isinstance(self.clip, (int, float)):
                raise ValueError(f"clip must be 'zclip', a max-norm > 0 or None, not {self.clip!r}")
            if not self.clip > 0:
                raise ValueError(f"clip max-norm must be > 0, not {self.clip!r}")
        if not 0 < self.zclip_alpha < 1:
            raise ValueError("zclip_alpha must be in (0, 1)")
        if self.zclip_z <= 0 or self.zclip_warmup < 1:
            raise ValueError("zclip_z must be > 0 and zclip_warmup >= 1")
        if self.rollback_after < 1 or self.snapshot_every < 1 or self.keep_snapshots < 1:
            raise ValueError("rollback_after, snapshot_every and keep_snapshots must be >= 1")
        if self.divergence_window < 2 or self.divergence_factor <= 1:
            raise ValueError("divergence_window must be >= 2 and divergence_factor > 1")
        if not 0 < self.lr_backoff <= 1:
            raise ValueError("lr_backoff must be in (0, 1]")
        if self.max_rollbacks < 0:
            raise ValueError("max_rollbacks must be >= 0")

    def describe(self) -> dict[str, str]:
        return {f.name: repr(getattr(self, f.name)) for f in fields(self)}
