"""dead_units: most units of a ReLU-family layer never activate.

Needs: per-unit activity of module outputs (fraction of positions with output > 0).

Rule (SageMaker Debugger): a unit is dead when it is active on less than ``ACTIVE``
(1%) of the positions it was seen at, and a layer is flagged when more than
``LAYER_SHARE`` (50%) of its units are dead on each of the last ``SAMPLES`` (3) activation
samples (all of them if fewer), so units that are merely sparse for a while, or a layer
that recovers, raise nothing. Only ReLU-family modules are judged, and modules whose
output goes through a functional ``F.relu`` (``meta['functional_activations']``): their
units that are never > 0 are that function's dead units. For other outputs "not > 0" is
not "dead". Samples whose outputs held NaN/Inf are left out: NaN is never > 0, and a unit
that outputs NaN is broken, not dead (the ``nonfinite`` finding's story).
"""

from __future__ import annotations

from .finding import Evidence, Finding, Kind
from .history import History

ACTIVE = 0.01
LAYER_SHARE = 0.5
SAMPLES = 3
RELU_FAMILY = ("ReLU", "ReLU6", "Threshold")


def dead_share(units: list[float]) -> float:
    """The share of a layer's units active on fewer than ``ACTIVE`` of the outputs: dead."""
    return sum(1 for u in units if u < ACTIVE) / len(units) if units else 0.0


def relu_family(module_type: str | None, name: str, functional: dict[str, str]) -> bool:
    """Where "dead" means something: a ReLU-family module's output, or a module's output
    that goes through ``F.relu`` (a linear layer's unit below 0 is fine otherwise)."""
    return module_type in RELU_FAMILY or functional.get(name) == "relu"


def check(h: History) -> list[Finding]:
    flagged = []
    functional = h.meta.get("functional_activations") or {}
    for m in h.modules:
        if not relu_family(m.type, m.name, functional):
            continue
        samples = h.units.get(m.name, {})
        broken = h.act(m.name, "nonfinite")
        skip = {s for s, v in zip(broken.steps, broken.values) if v}
        steps = sorted(s for s in samples if s not in skip)
        if not steps:
            continue
        recent = steps[-SAMPLES:]
        if not all(dead_share(samples[s]) > LAYER_SHARE for s in recent):
            continue
        first = next(  # the start of the run of dead samples that reaches the end
            s
            for i, s in enumerate(steps)
            if all(dead_share(samples[t]) > LAYER_SHARE for t in steps[i:])
        )
        alive = [t for t in steps if t < first]
        timing = {"first_sample": steps[0], "alive_until": alive[-1] if alive else None}
        flagged.append(
            (m.name, first, dead_share(samples[steps[-1]]), len(samples[steps[-1]]), timing)
        )
    if not flagged:
        return []
    name, first, share, width, timing = flagged[0]
    others = [f[0] or "(model)" for f in flagged[1:]]
    behind = " (its output goes through F.relu)" if functional.get(name) == "relu" else ""
    return [
        Finding(
            kind=Kind.DEAD_UNITS,
            severity="warning",
            step=first,
            layer=name,
            summary=(
                f"dead units: {share:.0%} of the {width} units of {name}{behind} never activate"
                + (f" (also in {', '.join(others)})" if others else "")
            ),
            evidence=[
                Evidence(
                    f"share of units active on < 1% of positions in {n}",
                    round(s, 3),
                    step=st,
                    type="distribution",
                )
                for n, st, s, _, _ in flagged
            ],
            details=timing,
        )
    ]
