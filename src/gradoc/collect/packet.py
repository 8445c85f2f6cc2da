"""The packet: the one place in ``collect`` that reads the device.

Everything a step's statistics need on the host (the loss, the gradient norms the guard and
the locator decide on, the per-parameter and per-module statistics the writer thread turns
into rows) is added to the run's packet as device tensors; :meth:`Packet.read` moves them to
the host in one transfer and hands the host vector to the readers that asked for it.

The run reads its packet once per step: at the step's statistics point when something must
be decided before the update (skip, clip, locate), together with the previous step's
statistics; otherwise after the step. On an accelerator each read is a synchronisation that
stops the CPU's run-ahead, so the count matters more than the bytes.

>>> p = Packet()
>>> at = p.add(torch.tensor([1.0, 2.0]))
>>> p.on_read(lambda host: print(host[at].tolist()))
>>> p.read().tolist()
[1.0, 2.0]
[1.0, 2.0]
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


class Packet:
    """Device tensors gathered for one host read, and who reads what came back."""

    __slots__ = ("_parts", "_readers", "_size")

    def __init__(self) -> None:
        self._parts: list[Tensor] = []
        self._size = 0
        self._readers: list[Callable[[Tensor], None]] = []

    def add(self, t: Tensor) -> slice:
        """Add a tensor (flattened); where its values will lie in the host vector."""
        t = t.reshape(-1)
        self._parts.append(t)
        self._size += t.numel()
        return slice(self._size - t.numel(), self._size)

    def on_read(self, reader: Callable[[Tensor], None]) -> None:
        """Call ``reader(host)`` with the whole host vector when the packet is read."""
        self._readers.append(reader)

    def __len__(self) -> int:
        """Tensors and readers waiting: 0 when a read would have nothing to do."""
        return len(self._parts) + len(self._readers)

    def read(self) -> Tensor:
        """Move everything to the host in one transfer, call the readers in the order they
        asked, and start an empty packet; the host vector (float64; float32 on MPS, which
        has no float64: float64 keeps counts exact beyond 2^24)."""
        parts, readers = self._parts, self._readers
        self._parts, self._size, self._readers = [], 0, []
        if parts:
            device = parts[0].device
            dtype = torch.float32 if device.type == "mps" else torch.float64
            host = torch.cat([p.to(device=device, dtype=dtype) for p in parts]).cpu()
        else:
            host = torch.zeros(0, dtype=torch.float64)
        for reader in readers:
            reader(host)
        return host
