"""gradoc: a training-stability doctor for PyTorch.

>>> import gradoc
>>> run = gradoc.watch(model, optimizer)        # doctest: +SKIP
"""

from ._version import __version__
from .collect import Run, watch
from .config import GuardConfig, WatchConfig
from .errors import GradocError
from .guard import GuardGaveUp
from .locate.numerics import NumericsError, check_numerics
from .schedule import every, log_spaced, never
from .store import RunLog, Series, open_run
from .tools import apply_checkpointing, plan_checkpointing
from .tools.padding import audit_padding

__all__ = [
    "GradocError",
    "GuardConfig",
    "GuardGaveUp",
    "NumericsError",
    "Run",
    "RunLog",
    "Series",
    "WatchConfig",
    "__version__",
    "apply_checkpointing",
    "audit_padding",
    "check_numerics",
    "every",
    "log_spaced",
    "never",
    "open_run",
    "plan_checkpointing",
    "watch",
]
