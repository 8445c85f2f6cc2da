"""collect/attach: how gradoc gets hold of what a program trains.

Every hook gradoc registers is registered here: the process-wide taps on PyTorch's entry
points (``taps``: ``backward()``, optimizers being made, clipping, ``.item()``), the watched
models' forward hooks that travel in no pickle (``watched``, ``_hooks``), the steps of a
program that trains without ``torch.optim`` (``manual``), the program's own clipping and
loss scaling (``clipping``) and the measures it logs itself (``logged``); with the names of
what is watched (``layers``), the activations applied as functions (``functional``) and
which modules a program trains (``models``). This room imports the package's engines,
collect's contracts at its top (``_safety``, ``probe``, ``context``) and the ``graph``
room; ``probes`` and ``step``, which build on it, only for their types.
"""

from . import logged, taps
from .clipping import ProgramClipping
from .functional import PRE_ACTIVATION_SATURATION, functional_activations
from .layers import SKIPPED, WatchedModule, WatchedParam, param_rows, qualified
from .manual import ManualSteps
from .models import ModelFinder
from .watched import Watched, batch_size

__all__ = [
    "PRE_ACTIVATION_SATURATION",
    "SKIPPED",
    "ManualSteps",
    "ModelFinder",
    "ProgramClipping",
    "Watched",
    "WatchedModule",
    "WatchedParam",
    "batch_size",
    "functional_activations",
    "logged",
    "param_rows",
    "qualified",
    "taps",
]
