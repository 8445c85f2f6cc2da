"""collect/step: the step protocol, from its hook entries to the host read and the rows.

What a watched run does at each point of a training step (``protocol``: the forward's
return, ``backward()``, the optimizer's step pre- and post-hooks), how the step's loss is
read (``loss_reading``) and which objective each loss trains (``objectives``), the sampled
probes' cadence (``cadence``), the vitals the guard decides on (``vitals``), the packet
that is the one place the device is read (``packet``), its way to the run log every few
steps (``transfers``) and the rows the writer thread makes of it (``record``). This room
imports every other room of collect (it drives them), the package's engines and the
guard; nothing in collect imports it but the run at the top.
"""

from .packet import Packet
from .protocol import Steps, probes_for

__all__ = ["Packet", "Steps", "probes_for"]
