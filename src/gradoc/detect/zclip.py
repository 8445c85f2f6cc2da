"""Adaptive gradient clipping: clip the global norm when it is an outlier against its own
history (ZClip, Kumar et al. 2025, "ZClip: Adaptive Spike Mitigation for LLM
Pre-Training", arXiv:2504.02507).

The norm's mean and variance are tracked with exponential moving averages (``alpha``
0.97), initialised from the first ``warmup`` norms (25), during which nothing is clipped.
A norm whose z-score ``z = (g - mean) / std`` exceeds ``z_thresh`` (2.5) is clipped to
``mean + z_thresh * std / (z / z_thresh)`` — the paper's "adaptive scaling": the larger
the outlier, the harder it is clipped — and the averages are then updated with the
clipped value, so a spike cannot drag the threshold up after it.

Pure host arithmetic on one float per step: the norm itself is computed on the device
with the run's other statistics and read with them. The one definition of these
statistics: the guard clips with it, ``exploding_gradients`` reports its z-score.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

WARMUP = 25
"""ZClip's default warm-up (``GuardConfig.zclip_warmup``)."""


@dataclass(slots=True)
class ZClip:
    alpha: float = 0.97
    z_thresh: float = 2.5
    warmup: int = WARMUP
    eps: float = 1e-6
    mean: float | None = None
    var: float = 0.0
    _buffer: list[float] = field(default_factory=list)

    def zscore(self, norm: float) -> float | None:
        """``(norm - mean) / std`` against the averages so far; None in warm-up."""
        if self.mean is None:
            return None
        return (norm - self.mean) / (math.sqrt(self.var) + self.eps)

    def threshold(self, norm: float) -> float | None:
        """The norm to clip ``norm`` to, or None when it is not an outlier (or in warm-up)."""
        z = self.zscore(norm)
        if z is None or self.mean is None or z <= self.z_thresh:
            return None
        return self.mean + self.z_thresh * math.sqrt(self.var) / (z / self.z_thresh)

    def update(self, norm: float) -> float | None:
        """Account for this step's (finite) global norm; return the clip target, if any."""
        if self.mean is None:
            self._buffer.append(norm)
            if len(self._buffer) >= self.warmup:
                n = len(self._buffer)
                self.mean = sum(self._buffer) / n
                self.var = sum((x - self.mean) ** 2 for x in self._buffer) / n
                self._buffer = []
            return None
        target = self.threshold(norm)
        effective = norm if target is None else target
        self.mean = self.alpha * self.mean + (1 - self.alpha) * effective
        self.var = self.alpha * self.var + (1 - self.alpha) * (effective - self.mean) ** 2
        return target
