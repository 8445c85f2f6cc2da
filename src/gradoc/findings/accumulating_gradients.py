"""accumulating_gradients: each step's gradient is the running sum of all earlier ones.

Needs: ``meta['grads_kept']``, what the collector saw of the gradients between optimizer
steps (``collect/probes/cleared.py``): on how many steps the ``.grad`` the optimizer applied was
the same tensor as the step before, changed by nothing but that step's backward calls;
and the global gradient norm per step, for the evidence.

A loop that lost its ``optimizer.zero_grad()`` (or clears gradients once, outside the
loop) adds every step's gradient to the ones before: the gradient the optimizer sees at
step t is ``g_0 + ... + g_t``. While the gradients share a direction its norm grows in
proportion to the steps taken, from the first step on (a character GRU without
``zero_grad``, tests/shapes/no_zero_grad.py: 0.17, 0.86 at step 6, 1.51 at 12, 6.2 at
114; the same loop with it: 0.16-0.18 throughout). That growth alone is no proof: a CNN
whose first gradients are small grows its norm as steadily on a healthy run (the norm
rule was tried and raised 5 false alarms on the synthetic corpus). So the rule is what
was observed: gradients kept on at least ``SHARE`` (half) of the steps checked, and on at
least ``MIN_STEPS`` (3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._util.json_types import JsonObject
from ..detect.finding import CodeLine, Evidence, Family, Finding, Fix, Horizon, Hypothesis, Weight
from ..detect.history import History
from ..detect.signals import fmt
from .advice import lr_too_high
from .facts import Facts
from .kind import Details, FindingKind

SHARE = 0.5
MIN_STEPS = 3
EARLY = 20
"""Steps over which the evidence measures the norm's growth."""


def _growth(h: History) -> tuple[int, float] | None:
    """The global gradient norm at the ``EARLY``-th recorded step over the first."""
    steps, values = h.grad_norm.steps[:EARLY], h.grad_norm.values[:EARLY]
    if len(values) < 2 or not (values[0] > 0 and math.isfinite(values[-1])):
        return None
    return steps[-1], values[-1] / values[0]


@dataclass(slots=True)
class Accumulated(Details):
    """Steps whose gradient was the previous step's plus its own, and the norm's growth."""

    kept: int
    checked: int
    first_kept: int | None
    growth: float | None = None
    """The global gradient norm at step ``growth_step`` over the first (when measured)."""
    growth_step: int | None = None
    optimizer: str | None = None
    """The variable holding the optimizer where the program steps it (a fix's edit)."""

    def to_json(self) -> JsonObject:
        out = Details.to_json(self)
        if self.growth is None:  # not measured: not written
            del out["growth"], out["growth_step"]
        if self.optimizer is None:
            del out["optimizer"]
        return out


class AccumulatingGradients(FindingKind):
    """Each step's gradient is the running sum of the earlier ones."""

    name = "accumulating_gradients"
    setup = True
    harm = (
        "The mechanism itself: the gradient the optimizer applied was kept from the step before "
        "(no zero_grad) on at least half of the steps checked."
    )
    link = 20
    example_details = Accumulated(kept=8, checked=8, first_kept=None)

    def check(self, h: History) -> list[Finding]:
        kept = h.meta.grads_kept or {}
        n, checked = kept.get("kept", 0), kept.get("checked", 0)
        if n < max(MIN_STEPS, SHARE * checked):
            return []
        first = kept.get("first_kept")
        step = first - 1 if isinstance(first, int) and first > 0 else 0  # the sum began there
        evidence = [
            Evidence(
                "steps whose gradient was the previous step's plus its own", f"{n} of {checked}"
            ),
            Evidence("first step that added to the previous gradient", first),
        ]
        at = kept.get("at") or {}
        details = Accumulated(n, checked, first, optimizer=at.get("optimizer"))
        growth = _growth(h)
        if growth is not None:
            evidence.append(
                Evidence(f"global gradient norm at step {growth[0]} / at the first", fmt(growth[1]))
            )
            details.growth, details.growth_step = growth[1], growth[0]
        return [
            self.found(
                severity="error",
                step=step,
                summary=(
                    f"accumulating gradients: on {n} of {checked} steps the gradient the optimizer "
                    "applied was the previous step's plus the new one (never cleared: "
                    "optimizer.zero_grad() missing?)"
                    + (
                        f"; the gradient norm grew {fmt(growth[1])}x by step {growth[0]}"
                        if growth
                        else ""
                    )
                ),
                evidence=evidence,
                details=details,
            )
        ]

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        d = Accumulated.of(f.details)
        f.symptom = (
            "the gradient the optimizer applies grows step after step: gradients are added up "
            "across steps instead of cleared"
        )
        loop = Hypothesis(
            Family.LOOP,
            "optimizer.zero_grad() missing from the training loop (or called once, outside it): "
            "backward() adds each step's gradient to the ones before",
            "print a parameter's p.grad.norm() right before loss.backward(): it should be 0 (or "
            "p.grad None) at every step",
            base=0.3,
        )
        lr = lr_too_high(0.1)
        loop.seen(
            f"on {d.kept} of {d.checked} steps the .grad the optimizer applied was the "
            "same tensor as the step before, changed only by that step's backward()",
            Weight.DECISIVE,
            step=d.first_kept,
        )
        if d.growth is not None:
            loop.seen(
                f"the gradient norm grew {fmt(d.growth)}x by step {d.growth_step}: a running "
                "sum of similar gradients grows with the steps",
                Weight.MODERATE,
                step=d.growth_step,
            )
        lr.against(
            "the gradients were never cleared: whatever the rate, each update applies the sum of "
            "all the gradients so far",
            Weight.STRONG,
        )
        f.fixes += [
            Fix(
                Horizon.IMMEDIATE,
                "call optimizer.zero_grad(set_to_none=True) once per step, before loss.backward() "
                "(with gradient accumulation: after each optimizer.step())",
                code=CodeLine.from_json((h.meta.grads_kept or {}).get("at")),
            ),
            Fix(
                Horizon.LONG_TERM,
                "test the training step: after optimizer.step() and zero_grad(), every p.grad is "
                "None or zero",
            ),
        ]
        f.monitoring.append(
            "the global gradient norm per step (a steady climb from step 0 is a sum)"
        )
        return [loop, lr]
