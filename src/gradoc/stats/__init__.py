"""Pure tensor statistics, computed on the tensors' own device.

Nothing here touches modules or optimizers, calls ``.item()`` or moves data to the
host: each function returns small device tensors that the collector packs into one
transfer per step. Every function is tested against the obvious slow implementation.
"""

from .activations import (
    ActivationStats,
    activation_stats,
    activation_stats_rows,
    combine,
    saturation_rule,
    unit_dim,
)
from .tensors import (
    Plan,
    Snapshot,
    large,
    max_abs,
    nonfinite_counts,
    norms,
    plan,
    update_stats,
)

__all__ = [
    "ActivationStats",
    "Plan",
    "Snapshot",
    "activation_stats",
    "activation_stats_rows",
    "combine",
    "large",
    "max_abs",
    "nonfinite_counts",
    "norms",
    "plan",
    "saturation_rule",
    "unit_dim",
    "update_stats",
]
