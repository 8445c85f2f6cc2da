"""poor_initialization: activations shrink or grow layer after layer from the first step.

Needs: per-module output std at the first activation sample.

Rule: take the outputs of the linear and convolution layers in forward order at the
first sample. Initialisation is poor when their std changes monotonically across at
least ``MIN_LAYERS`` (4) of them, by at least ``PER_LAYER`` (2x) a layer on average, and by
at least ``TOTAL`` (100x) overall. SageMaker Debugger flags a variance spread of 10x
across layers; on the calibration runs that flags PyTorch's default init on a 3-layer
MLP (variance 30x lower at the end, harmless) and a transformer (attention outputs vs
embeddings), so the rule asks for a consistent trend instead. A 10-layer ReLU MLP with
N(0, 1) weights grows ~6x a layer; std-0.01 tanh layers shrink ~12x a layer.
"""

from __future__ import annotations

import itertools
import math

from ._util import fmt
from .finding import Finding
from .history import History

CHAIN = ("Linear", "Conv1d", "Conv2d", "Conv3d", "LazyLinear")
MIN_LAYERS = 4
PER_LAYER = 2.0
TOTAL = 100.0


def check(h: History) -> list[Finding]:
    chain: list[tuple[str, int, float]] = []
    for m in h.modules:
        if m.type not in CHAIN:
            continue
        std = h.act(m.name, "std")
        if std.steps and math.isfinite(std.values[0]) and std.values[0] > 0:
            chain.append((m.name, std.steps[0], std.values[0]))
    if len(chain) < MIN_LAYERS:
        return []
    logs = [math.log10(s) for _, _, s in chain]
    diffs = [b - a for a, b in itertools.pairwise(logs)]
    monotone = all(d > 0 for d in diffs) or all(d < 0 for d in diffs)
    total = abs(logs[-1] - logs[0])
    if not monotone or total < math.log10(TOTAL) or total / len(diffs) < math.log10(PER_LAYER):
        return []
    grows = diffs[0] > 0
    factor = 10 ** (total / len(diffs))
    first, last = chain[0], chain[-1]
    return [
        Finding(
            kind="poor_initialization",
            severity="warning",
            step=first[1],
            layer=last[0],
            summary=(
                f"poor initialisation: activations {'grow' if grows else 'shrink'} ~{fmt(factor)}x "
                f"a layer, std {fmt(first[2])} at {first[0]} to {fmt(last[2])} at {last[0]}"
            ),
            evidence=[
                {"signal": f"output std of {n}", "step": s, "value": fmt(v)} for n, s, v in chain
            ],
        )
    ]
