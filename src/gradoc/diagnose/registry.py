"""The diagnosis of each finding kind, one module each (as ``detect/`` has one detector
each): ``KIND``, ``CAUSED_BY`` (the kinds that can cause it, strongest first),
``CONSIDERS_ZERO_INIT`` (weights that start at zero are a cause to weigh) and
``explain(finding, history, facts) -> list[Hypothesis]``. Adding a finding kind end to end
touches its detector, its module here and their tests; tests/test_registry.py checks that
every kind a detector or a locator can emit has one."""

from __future__ import annotations

from types import ModuleType

from ..detect.finding import HORIZONS, Finding, Kind, State, rank
from ..detect.history import History
from . import (
    accumulating,
    dead_units,
    exploding,
    fp16_overflow,
    fp16_underflow,
    frozen,
    large_updates,
    length_anomaly,
    log_incomplete,
    loss_blowup,
    loss_divergence,
    loss_includes_padding,
    loss_plateau,
    loss_spike,
    nonfinite,
    padding_leak,
    padding_waste,
    poor_initialization,
    saturated_units,
    tiny_updates,
    vanishing,
)
from .advice import zero_init
from .facts import Facts

MODULES: tuple[ModuleType, ...] = (
    nonfinite,
    exploding,
    vanishing,
    dead_units,
    saturated_units,
    loss_spike,
    loss_blowup,
    loss_divergence,
    loss_plateau,
    poor_initialization,
    large_updates,
    tiny_updates,
    fp16_overflow,
    fp16_underflow,
    padding_leak,
    loss_includes_padding,
    length_anomaly,
    padding_waste,
    accumulating,
    frozen,
    log_incomplete,
)
REGISTRY: dict[Kind, ModuleType] = {m.KIND: m for m in MODULES}


def explain(f: Finding, h: History, facts: Facts) -> None:
    """Fill in the diagnosis of one finding, in place."""
    module = REGISTRY[f.kind]
    made = module.explain(f, h, facts)
    if module.CONSIDERS_ZERO_INIT and (zero := zero_init(facts)) is not None:
        made.append(zero)
    f.fixes.sort(key=lambda x: HORIZONS.index(x.horizon))  # stable: in order of likelihood
    f.hypotheses = rank(made)
    if not f.hypotheses:
        return
    top = f.hypotheses[0]
    f.root_cause_family = top.family
    support = top.claims(State.SEEN)
    f.root_cause = top.cause + (f" ({'; '.join(support)})" if support else "")
    if not top.confirmed:
        f.root_cause += (
            " (not confirmed: no sign of it, or of another cause, was seen in this run; "
            "the most common cause of this symptom)"
        )
