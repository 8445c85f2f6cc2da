"""locate: find where a NaN/Inf was born — op, module, source line, phase.

Nothing here runs while training is healthy. On the first non-finite step the collector
calls :func:`locate_step`, which replays the step's model forward (same inputs, RNG state
restored, weights as they were before the update) and backward under op-level checks.
A loss already non-finite at ``backward()`` is read first from its own autograd graph
(:func:`origin_in_graph`): no replay.
"""

from ..detect.finding import Origin
from .graph import origin_in_graph
from .replay import ArmedTrace, Birth, check_inputs, check_weights, locate_step, origin_from

__all__ = [
    "ArmedTrace",
    "Birth",
    "Origin",
    "check_inputs",
    "check_weights",
    "locate_step",
    "origin_from",
    "origin_in_graph",
]
