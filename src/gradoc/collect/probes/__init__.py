"""collect/probes: where a step's statistics are taken.

Each probe is one live statistic (``collect.probe.Probe``) that the step protocol calls at
the points of a step: the gradients' norms, the weights and the updates (``grads``), the
activations and AMP ranges (``activations``), the batches' lengths and padding
(``lengths``, ``padding``), where a NaN was born (``locate``, with ``locating`` keeping
what a replay needs), whether gradients are cleared (``cleared``), Adam's second moments
(``adam_state``), what the program set up (``setup``) and a notebook's live status
(``notebook``). A probe leaves its statistics on the device for the step's one host read.
This room imports the package's engines, collect's contracts at its top and the
``attach`` and ``graph`` rooms; ``step`` (the packet) only for its types.
"""

from .activations import Activations, AmpRanges, Calls, activation_rows
from .adam_state import eps_shares
from .cleared import Clearing
from .grads import Slices, WatchedOptimizer, grad_rows, lr_of, received_counts
from .lengths import Lengths
from .locate import Locate
from .locating import Locator
from .notebook import LiveStatus, in_notebook, status_html
from .padding import PaddingAudit
from .setup import SetupCheck

__all__ = [
    "Activations",
    "AmpRanges",
    "Calls",
    "Clearing",
    "Lengths",
    "LiveStatus",
    "Locate",
    "Locator",
    "PaddingAudit",
    "SetupCheck",
    "Slices",
    "WatchedOptimizer",
    "activation_rows",
    "eps_shares",
    "grad_rows",
    "in_notebook",
    "lr_of",
    "received_counts",
    "status_html",
]
