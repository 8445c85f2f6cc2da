"""The guard's decisions, one per optimizer step, from the step's vital signs.

At each optimizer pre-step the run reads the step's loss, whether any gradient is
non-finite and the global gradient norm (one host read it makes anyway); under DDP the
flags and numbers are all-reduced first, so every rank takes the same decision. Then:

1. non-finite loss or gradient -> **skip** (the run drops the gradients, so the optimizer
   changes nothing, and holds back a per-step scheduler); ``rollback_after`` such steps
   in a row -> **roll back**;
2. otherwise the loss feeds the divergence check (-> **roll back**), and the norm feeds
   ZClip or the fixed max-norm (-> **clip**, one foreach multiply on the device);
3. a rollback restores the newest snapshot from before the trouble, multiplies every
   learning rate by ``lr_backoff`` and drops the step's gradients; past
   ``max_rollbacks`` the guard gives up with :class:`GuardGaveUp`.

Snapshots are taken at the pre-step of healthy steps, every ``snapshot_every`` steps.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor
from torch.optim import Optimizer

from .._util.entry import Deliberate
from .._util.json_types import JsonObject
from .._util.objects import IdMap
from ..config import GuardConfig, WatchConfig
from ..detect.finding import Origin
from ..detect.signals import diverged
from ..detect.zclip import ZClip
from ..errors import GradocError
from ..store import EventKind
from . import lr
from .snapshots import Snapshot

QUIET_EVENTS = 10
"""Skips the default guard logs as events (the report counts them all)."""


@dataclass(frozen=True, slots=True)
class GuardSummary:
    """What the guard did (``guard=True``, ``gradoc run --guard``)."""

    skipped: int = 0
    clipped: int = 0
    rollbacks: int = 0
    gave_up: bool = False
    lr_scale: float = 1.0
    snapshot_bytes: int = 0

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GuardSummary:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)


class GuardGaveUp(GradocError, RuntimeError, Deliberate):
    """Raised from ``optimizer.step()`` when the guard has rolled back too often
    (``gradoc run`` then exits with status 4)."""

    exit_code = 4


@dataclass(slots=True)
class Vitals:
    """What one optimizer step looked like (after agreement across ranks)."""

    loss_bad: bool
    grads_bad: bool
    loss: float | None
    norm: float | None

    @property
    def bad(self) -> bool:
        return self.loss_bad or self.grads_bad


@dataclass(slots=True)
class Decision:
    skip: bool = False
    clip_to: float | None = None
    rollback: bool = False
    to: Snapshot | None = None
    """The snapshot to roll back to (None: there is none, and the guard gives up)."""
    reason: str = ""
    diverged: bool = False
    """The rollback is for a diverging loss (not for non-finite steps)."""


@dataclass(slots=True)
class _Divergence:
    """Rolling median of the loss against its best; see GuardConfig.rollback_on_divergence."""

    window: int
    factor: float
    losses: deque[float] = field(default_factory=deque)
    first: float | None = None
    best: float = float("inf")
    best_step: int = 0

    def update(self, step: int, loss: float) -> str | None:
        self.losses.append(loss)
        if len(self.losses) > self.window:
            self.losses.popleft()
        if len(self.losses) < self.window:
            return None
        median = statistics.median(self.losses)
        if self.first is None:
            self.first = median
        if median < self.best:
            self.best, self.best_step = median, step
        if diverged(median, self.best, self.first, self.factor):  # the detector's rule
            return (
                f"loss diverged: rolling median {median:.4g} over {self.window} steps, "
                f"{median / self.best if self.best else float('inf'):.3g}x its best "
                f"({self.best:.4g} at step {self.best_step})"
            )
        return None

    def reset(self) -> None:
        self.losses.clear()


def _collective(config: GuardConfig) -> bool:
    if config.collective is not None:
        return config.collective
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def agree(vitals: Vitals, device: torch.device | None) -> Vitals:
    """All ranks' vitals combined: bad anywhere is bad everywhere; numbers are averaged."""
    import torch.distributed as dist

    on = device if device is not None and device.type == "cuda" else torch.device("cpu")
    flags = torch.tensor(
        [
            float(vitals.loss_bad),
            float(vitals.grads_bad),
            vitals.loss if vitals.loss is not None and not vitals.bad else 0.0,
            vitals.norm if vitals.norm is not None and not vitals.bad else 0.0,
        ],
        dtype=torch.float64,
        device=on,
    )
    dist.all_reduce(flags)
    loss_bad, grads_bad, loss, norm = flags.tolist()
    n = dist.get_world_size()
    return Vitals(
        loss_bad > 0,
        grads_bad > 0,
        loss / n if vitals.loss is not None else None,
        norm / n if vitals.norm is not None else None,
    )


class Guard:
    """Decides and acts; owned by a :class:`gradoc.Run` (which logs through ``event``)."""

    def __init__(
        self, config: GuardConfig, event: Callable[..., None], *, every_step: bool = True
    ) -> None:
        """``every_step=False``: the default guard of a run that did not ask for one (it only
        skips): it decides on the statistics the run collects anyway and logs its first
        ``QUIET_EVENTS`` skips."""
        self.config = config
        self.event = event
        self.every_step = every_step
        self.needs_norm = config.clip is not None
        """The global gradient norm is read for clipping."""
        self.collective = _collective(config)
        self.skipped = 0
        self.clipped = 0
        self.rollbacks = 0
        self.gave_up = False
        self.lr_scale = 1.0
        self._bad_streak = 0
        self._zclip: IdMap[Optimizer, ZClip] = IdMap()
        self._optimizers: list[Optimizer] = []
        self._divergence = _Divergence(config.divergence_window, config.divergence_factor)
        self._snapshots: deque[Snapshot] = deque(maxlen=config.keep_snapshots)
        self._device = torch.device(config.snapshot_device) if config.snapshot_device else None
        lr.install()
        self._open = True

    @classmethod
    def of(cls, config: WatchConfig, event: Callable[..., None]) -> Guard | None:
        """The guard a run's configuration asks for (``WatchConfig.guard_config``): the one
        given, acting on every step, else the default that only skips; None when
        non-finite steps are not skipped."""
        guard = config.guard_config()
        if guard is None:
            return None
        return cls(guard, event, every_step=isinstance(config.guard, GuardConfig))

    def close(self) -> None:
        if self._open:
            self._open = False
            lr.uninstall()

    def watch(self, optimizer: Optimizer) -> None:
        lr.tracker(optimizer)
        if optimizer not in self._optimizers:
            self._optimizers.append(optimizer)

    def state_dict(self) -> dict[str, Any]:
        """What the guard has learnt, for a job's checkpoint: its counters, the ZClip
        averages of each watched optimizer (in the order they were watched), the divergence
        check's window and best. Snapshots are not in it (the job's checkpoint is one); a
        resumed guard takes its next at the next ``snapshot_every`` step."""
        zclip = [self._zclip.get(o) for o in self._optimizers]
        d = self._divergence
        return {
            "skipped": self.skipped,
            "clipped": self.clipped,
            "rollbacks": self.rollbacks,
            "lr_scale": self.lr_scale,
            "bad_streak": self._bad_streak,
            "zclip": [
                None if z is None else {"mean": z.mean, "var": z.var, "warmup": list(z._buffer)}
                for z in zclip
            ],
            "divergence": {
                "losses": list(d.losses),
                "first": d.first,
                "best": d.best,
                "best_step": d.best_step,
            },
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from :meth:`state_dict` (call it once the resumed job's optimizers are
        watched: ZClip's averages go to them in the order they were watched)."""
        self.skipped, self.clipped = int(state["skipped"]), int(state["clipped"])
        self.rollbacks, self.lr_scale = int(state["rollbacks"]), float(state["lr_scale"])
        self._bad_streak = int(state["bad_streak"])
        c = self.config
        for optimizer, z in zip(self._optimizers, state["zclip"]):
            if z is not None:
                self._zclip[optimizer] = ZClip(
                    c.zclip_alpha, c.zclip_z, c.zclip_warmup, mean=z["mean"], var=z["var"]
                )
                self._zclip[optimizer]._buffer = list(z["warmup"])
        d = state["divergence"]
        self._divergence.losses = deque(d["losses"])
        self._divergence.first, self._divergence.best = d["first"], float(d["best"])
        self._divergence.best_step = int(d["best_step"])

    def summary(self) -> GuardSummary:
        return GuardSummary(
            skipped=self.skipped,
            clipped=self.clipped,
            rollbacks=self.rollbacks,
            gave_up=self.gave_up,
            lr_scale=self.lr_scale,
            snapshot_bytes=self._snapshots[-1].nbytes() if self._snapshots else 0,
        )

    # -- deciding -------------------------------------------------------------------------
    def decide(self, optimizer: Optimizer, step: int, primary: bool, v: Vitals) -> Decision:
        c = self.config
        tracker = lr.tracker(optimizer)
        tracker.skipped = False
        if v.bad:
            what = "loss" if v.loss_bad and not v.grads_bad else "gradients"
            d = Decision(skip=c.skip_nonfinite, reason=f"non-finite {what}")
            if primary:
                self._bad_streak += 1
                if c.rollback and self._bad_streak >= c.rollback_after:
                    d.rollback, d.to = True, self._restore_point(None)
                    d.reason = f"{self._bad_streak} non-finite steps in a row"
            return d
        if primary:
            self._bad_streak = 0
            if c.rollback and c.rollback_on_divergence and v.loss is not None:
                diverged = self._divergence.update(step, v.loss)
                if diverged:
                    point = self._restore_point(self._divergence.best_step)
                    return Decision(rollback=True, to=point, reason=diverged, diverged=True)
        if v.norm is None or c.clip is None:
            return Decision()
        if c.clip == "zclip":
            z = self._zclip.get(optimizer)
            if z is None:
                z = self._zclip[optimizer] = ZClip(c.zclip_alpha, c.zclip_z, c.zclip_warmup)
            target = z.update(v.norm)
        else:
            target = float(c.clip) if v.norm > c.clip else None
        return Decision(clip_to=target, reason="outlier gradient norm" if target else "")

    def _restore_point(self, before: int | None) -> Snapshot | None:
        """The newest snapshot at or before step ``before`` (else the oldest kept)."""
        if not self._snapshots:
            return None
        if before is not None:
            for snap in reversed(self._snapshots):
                if snap.step <= before:
                    return snap
        return self._snapshots[0] if before is not None else self._snapshots[-1]

    # -- acting ---------------------------------------------------------------------------
    def clip(self, grads: list[Tensor], norm: float, target: float, step: int) -> None:
        """Scale the gradients so their global norm is ``target``: one foreach multiply."""
        torch._foreach_mul_(grads, target / (norm + 1e-6))
        self.clipped += 1
        self.event(
            EventKind.CLIPPED,
            f"gradient norm {norm:.4g} clipped to {target:.4g}",
            step=step,
            norm=norm,
            to=target,
        )

    def skipped_step(
        self, optimizer: Optimizer, step: int, reason: str, origin: Origin | None
    ) -> None:
        """Log a skipped step, with where its NaN was born when it was located."""
        lr.tracker(optimizer).skipped = True
        self.skipped += 1
        if not self.every_step and self.skipped > QUIET_EVENTS:
            return
        where = f" ({origin.phase}: {origin.op})" if origin else ""
        data = {"reason": reason, **({"origin": origin.to_json()} if origin else {})}
        self.event(
            EventKind.SKIPPED_UPDATE, f"step {step} not applied: {reason}{where}", step=step, **data
        )

    def stepped(self, optimizer: Optimizer) -> None:
        """After every optimizer step (applied or not): the schedulers' clock."""
        lr.tracker(optimizer).steps += 1

    def maybe_snapshot(
        self, step: int, models: list[nn.Module], optimizers: list[Optimizer]
    ) -> None:
        if self.config.rollback and step % self.config.snapshot_every == 0:
            self._snapshots.append(
                Snapshot.take(step, models, optimizers, self.lr_scale, self._device)
            )

    def rollback(
        self,
        snapshot: Snapshot | None,
        step: int,
        reason: str,
        models: list[nn.Module],
        optimizers: list[Optimizer],
        diverged: bool = False,
    ) -> None:
        if snapshot is None or self.rollbacks >= self.config.max_rollbacks:
            self.gave_up = True
            why = (
                "no snapshot to roll back to"
                if snapshot is None
                else f"already rolled back {self.rollbacks} times (max_rollbacks)"
            )
            message = f"gradoc guard gave up at step {step}: {reason}; {why}"
            self.event(EventKind.GUARD_GAVE_UP, message, step=step, reason=reason)
            raise GuardGaveUp(message + "; see the run's report for the diagnosis")
        snapshot.restore(models, optimizers)
        self.rollbacks += 1
        self.lr_scale *= self.config.lr_backoff
        for opt in optimizers:
            lr.scale_lr(opt, self.config.lr_backoff)
        self._bad_streak = 0
        self._divergence.reset()
        self.event(
            EventKind.ROLLBACK,
            f"{reason}: restored the snapshot of step {snapshot.step}, learning rate x"
            f"{self.config.lr_backoff:g} (now x{self.lr_scale:g} of the original)",
            step=step,
            to_step=snapshot.step,
            reason=reason,
            diverged=diverged,
            lr_scale=self.lr_scale,
        )
