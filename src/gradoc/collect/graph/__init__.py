"""collect/graph: what a step's loss is, read from its autograd graph.

At ``backward()`` the step's losses are looked at through their ``grad_fn`` graphs, never
through names: which kind of training they are (``mechanics``: likelihood, policy gradient,
adversarial, reconstruction), how the program made the loss (``losses``), a categorical
policy's entropy (``policy``), attention's sharpness and the output logits' level
(``attention``, ``output_logits``), and the leaves a loss reaches. Every reader walks the
graph through the one :class:`~.walk.Walk` (``walk``): one budget, one pruning rule.
Nothing here hooks or holds a live object: a reader is handed a graph's root and returns
statistics on the device. This room imports the package's engines (``stats``, ``store``,
``locate``, ``_util``) and collect's contracts at its top (``probe``); no other room of
collect.
"""

from . import losses, mechanics
from .attention import AttentionReader, attention_row
from .losses import Seen, loss_like
from .policy import PolicyReader
from .walk import NODES, REACH, Walk, graph_leaves

__all__ = [
    "NODES",
    "REACH",
    "AttentionReader",
    "PolicyReader",
    "Seen",
    "Walk",
    "attention_row",
    "graph_leaves",
    "loss_like",
    "losses",
    "mechanics",
]
