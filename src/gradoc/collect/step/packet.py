"""The packet: the one place in ``collect`` that reads the device.

Everything a step's statistics need on the host (the loss, the gradient norms the guard and
the locator decide on, the per-parameter and per-module statistics the writer thread turns
into rows) is added to the run's packet as device tensors; :meth:`Packet.read` moves them to
the host in one transfer and hands the host vector to the readers that asked for it.

The run sends its packet every few steps (see ``steps``): on the CPU it is read at once; on
an accelerator, where a read is a synchronisation that stops the CPU's run-ahead (the count
matters more than the bytes), it is copied into pinned memory behind the device's work and
read once its event says the copy completed (:meth:`Packet.send`, :meth:`Packet.poll`), so
that no step waits for the device.

>>> p = Packet()
>>> at = p.add(torch.tensor([1.0, 2.0]))
>>> p.on_read(lambda host: print(host[at].tolist()))
>>> p.read().tolist()
[1.0, 2.0]
[1.0, 2.0]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor


class Packet:
    """Device tensors gathered for one host read, and who reads what came back."""

    __slots__ = ("_flight", "_parts", "_readers", "_size")

    def __init__(self) -> None:
        self._parts: list[Tensor] = []
        self._size = 0
        self._readers: list[Callable[[Tensor], None]] = []
        self._flight: list[tuple[Tensor, Any, list[Callable[[Tensor], None]]]] = []
        """Packets sent and not read yet: (host vector, its copy's event, readers)."""

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

    def _take(self) -> tuple[Tensor | None, list[Callable[[Tensor], None]]]:
        """The parts as one vector on their device (float64; float32 on MPS, which has no
        float64: float64 keeps counts exact beyond 2^24), and the readers; an empty packet
        starts."""
        parts, readers = self._parts, self._readers
        self._parts, self._size, self._readers = [], 0, []
        if not parts:
            return None, readers
        device = parts[0].device
        dtype = torch.float32 if device.type == "mps" else torch.float64
        # NOTE: only the parts of another dtype or device are cast (an op each)
        same = [
            p if p.dtype == dtype and p.device == device else p.to(device, dtype) for p in parts
        ]
        return torch.cat(same), readers

    def read(self) -> Tensor:
        """Move everything to the host in one transfer (waiting for it), call the readers in
        the order they asked, and start an empty packet; the host vector."""
        self.poll(wait=True)  # packets sent earlier are read first, in order
        vector, readers = self._take()
        host = vector.cpu() if vector is not None else torch.zeros(0, dtype=torch.float64)
        for reader in readers:
            reader(host)
        return host

    def send(self) -> None:
        """Start moving everything to the host without waiting: on an accelerator a copy
        into pinned memory behind the step's work, read by :meth:`poll` once it completed
        (on the CPU the vector is the host's at once)."""
        vector, readers = self._take()
        if vector is None:
            host, event = torch.zeros(0, dtype=torch.float64), None
        elif vector.device.type == "cpu":
            host, event = vector.cpu(), None
        else:
            host = torch.empty(vector.shape, dtype=vector.dtype, pin_memory=True)
            host.copy_(vector, non_blocking=True)
            event = _event(vector.device)
        self._flight.append((host, event, readers))

    def poll(self, wait: bool = False) -> int:
        """Read the packets sent whose copy completed (all of them with ``wait``), in the
        order they were sent; how many are still in flight. Asking an event costs no
        synchronisation."""
        while self._flight:
            host, event, readers = self._flight[0]
            if event is not None and not event.query():
                if not wait:
                    break
                event.synchronize()
            self._flight.pop(0)
            for reader in readers:
                reader(host)
        return len(self._flight)


def _event(device: torch.device) -> Any:
    """A recorded event on ``device``'s current stream (None where there is none: the copy
    is then read when it is next polled, which waits for it)."""
    event: Any
    if device.type == "cuda":
        event = torch.cuda.Event()
    elif hasattr(torch, "Event"):
        try:
            event = torch.Event(device=device)
        except (RuntimeError, TypeError):  # pragma: no cover - a backend without events
            return None
    else:  # pragma: no cover - PyTorch without device-generic events
        return None
    event.record()
    return event
