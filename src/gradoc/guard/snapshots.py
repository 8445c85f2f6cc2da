"""In-memory snapshots of models and optimizers, for the guard's rollback.

A snapshot is a copy of every model's ``state_dict()`` (parameters and buffers) and every
optimizer's state (momentum, Adam moments, step counts). Memory: the model's parameters
and buffers once, plus the optimizer state (SGD with momentum: 1x the parameters, Adam and
AdamW: 2x), per kept snapshot. With the defaults (two snapshots, on the parameters' own
device) an Adam run holds 6x its parameter bytes extra; ``snapshot_device="cpu"`` moves
them to host memory instead.

Restoring copies the tensors back in place, so parameters keep their identity (and the
optimizer's references to them); the optimizer's hyperparameters (learning rate, momentum)
are left as they are now: rolling back rewinds the weights, not the schedule.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
from torch.optim import Optimizer


def _copy(value: Any, device: torch.device | None) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().to(device=device, copy=True) if device else value.detach().clone()
    if isinstance(value, dict):
        return {k: _copy(v, device) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_copy(v, device) for v in value)
    return copy.deepcopy(value)


@dataclass(slots=True)
class Snapshot:
    step: int
    """The step the snapshot was taken before (its weights are those step ``step`` saw)."""
    models: list[dict[str, Any]]
    optimizers: list[dict[Any, Any]]
    lr_scale: float
    """The guard's cumulative learning-rate backoff when it was taken."""

    @classmethod
    def take(
        cls,
        step: int,
        models: list[nn.Module],
        optimizers: list[Optimizer],
        lr_scale: float,
        device: torch.device | None = None,
    ) -> Snapshot:
        with torch.no_grad():
            return cls(
                step,
                [_copy(nn.Module.state_dict(m), device) for m in models],
                [_copy(Optimizer.state_dict(o)["state"], device) for o in optimizers],
                lr_scale,
            )

    def restore(self, models: list[nn.Module], optimizers: list[Optimizer]) -> None:
        with torch.no_grad():
            for model, state in zip(models, self.models, strict=True):
                nn.Module.load_state_dict(model, state)  # copies in place
            for opt, state in zip(optimizers, self.optimizers, strict=True):
                groups = Optimizer.state_dict(opt)["param_groups"]  # today's hyperparameters
                # a copy: the optimizer updates its state in place, the snapshot must stay
                Optimizer.load_state_dict(
                    opt, {"state": _copy(state, None), "param_groups": groups}
                )

    def nbytes(self) -> int:
        total = 0

        def add(value: Any) -> None:
            nonlocal total
            if isinstance(value, torch.Tensor):
                total += value.numel() * value.element_size()
            elif isinstance(value, dict):
                for v in value.values():
                    add(v)
            elif isinstance(value, (list, tuple)):
                for v in value:
                    add(v)

        add(self.models)
        add(self.optimizers)
        return total
