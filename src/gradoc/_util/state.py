"""The user's state gradoc must leave as it found it when it runs the user's model again.

A replay of a step (locate), the padding audit and the numerics harness call the user's
modules; :func:`kept` puts back everything such a call changes behind the user's back: the
anomaly-mode flag, the CPU and CUDA random number generators, the modules' buffers
(BatchNorm's running statistics) and the gradients of the given tensors.

>>> import torch.nn as nn
>>> bn, before = nn.BatchNorm1d(2), torch.get_rng_state()
>>> with kept([bn]):
...     _ = bn(torch.randn(4, 2))
>>> bn.running_mean.tolist(), bool((torch.get_rng_state() == before).all())
([0.0, 0.0], True)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from . import objects

RngState = dict[str, Any]


def rng_state() -> RngState:
    """The CPU generator's state and, once CUDA is in use, every CUDA device's (reading them
    waits for no device: the CUDA state is a seed and an offset kept on the host)."""
    state: RngState = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def same_rng(a: RngState, b: RngState) -> bool:
    """The two states are the same: no random number was drawn between them."""
    if not torch.equal(a["cpu"], b["cpu"]) or len(a.get("cuda", ())) != len(b.get("cuda", ())):
        return False
    return all(torch.equal(x, y) for x, y in zip(a.get("cuda", ()), b.get("cuda", ())))


def set_rng_state(state: RngState) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])


Anomaly = tuple[bool, bool]
"""Anomaly mode's flags: (on, its NaN check on)."""


def anomaly_state() -> Anomaly:
    return torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()


def set_anomaly_state(state: Anomaly) -> None:
    torch.set_anomaly_enabled(*state)


@contextlib.contextmanager
def kept(
    modules: Sequence[nn.Module],
    tensors: Sequence[Tensor] = (),
    start: RngState | None = None,
) -> Iterator[None]:
    """Within the block the user's model may be run; after it the anomaly flag, the RNG
    states, the ``modules``' buffers and the ``tensors``' gradients are as before. With
    ``start``, the block begins from that RNG state (a replay draws the dropout masks the
    step drew; an empty one: the forward drew none, see ``collect.attach.watched``)."""
    anomaly = anomaly_state()
    rng = rng_state()
    buffers = [(m, k, b.detach().clone()) for m in modules for k, b in objects.named_buffers(m)]
    grads = [(t, t.grad) for t in tensors]
    try:
        if start:
            set_rng_state(start)
        yield
    finally:
        set_anomaly_state(anomaly)
        set_rng_state(rng)
        with torch.no_grad():
            now = {(id(m), k): b for m in modules for k, b in objects.named_buffers(m)}
            for m, k, saved in buffers:  # by name: a forward may rebind a buffer
                found = now.get((id(m), k))
                if found is not None and found.shape == saved.shape:
                    found.copy_(saved)
        for t, g in grads:
            t.grad = g
