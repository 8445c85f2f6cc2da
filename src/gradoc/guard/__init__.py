"""guard: keep a long run alive — skip non-finite steps, clip outlier gradients, roll back.

The only code besides ``collect`` that changes live training state; every action it takes
is recorded in the run log.
"""

from ..config import GuardConfig
from ..detect.zclip import ZClip
from .guard import Decision, Guard, GuardGaveUp, GuardSummary, Vitals, agree
from .lr import scale_lr
from .snapshots import Snapshot

__all__ = [
    "Decision",
    "Guard",
    "GuardConfig",
    "GuardGaveUp",
    "GuardSummary",
    "Snapshot",
    "Vitals",
    "ZClip",
    "agree",
    "scale_lr",
]
