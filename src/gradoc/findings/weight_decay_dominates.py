"""weight_decay_dominates: the weight decay, not the gradient, is what moves the weights.

Needs: the optimizer's setting (``meta['optimizers']``: its type, learning rate, momentum
and weight_decay), the learning rate per step, and the weight matrices' weight and update
norms (params schedule).

A decay takes ``lr * wd`` of every weight each step (decoupled, AdamW and Lion; SGD adds
``wd * w`` to the gradient, which its momentum carries over ``1 / (1 - momentum)`` steps).
Of the update ``Δw`` the optimizer applies, the decay's part is ``lr * wd * ||w||``; its share,
``D = lr * wd * ||w|| / ||Δw||``, says what moves the weights. A usual setting keeps it small:
AdamW at lr 1e-3 with wd 0.01 gave D = 0.001-0.004 on every weight matrix of our tabular MLP.
A setting 1,000x too strong (wd 10, a config that listed 0.01 as a percentage) gave D = 0.5-3
over the second half of the run: the step the gradient asks for and the decay cancel, and the
weights sit where the decay holds them. Its loss stalled at 0.95 against 0.07, falling all the
while, so no loss rule saw it (``benchmarks/bugs/tabular_weight_decay``).

Rule: one optimizer, of a kind whose decay is decoupled or SGD's (Adam's ``weight_decay`` is
added to the gradient before its normalisation, and this share does not measure it), whose
setting is far too strong by its own numbers (``advice.too_strong``: ``lr * wd`` per step of
at least ``DECAY_STRONG``, 5e-3, with a weight_decay 10x the largest usual one for its kind),
and on at least half of the weight matrices the median ``D`` over the run's second half (at
least ``MIN_SAMPLES``, 3, sampled steps: the last 3 where a sparse cadence left fewer there)
reaches ``DOMINATES`` (0.5). The rotational
equilibrium a long healthy run settles into (Kosson et al., 2024) has ``D`` near
``sqrt(lr * wd / 2)``: 0.005 for AdamW at lr 6e-4 and wd 0.1.

Harm: the mechanism itself: at least half of what moves the weights is the decay, on a
setting 10x beyond the usual one. A warning.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ..detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, RuledOut, Weight
from ..detect.history import History
from ..detect.signals import fmt, optimizer_type, second_half, weight_params
from .advice import DECAY_STRONG, DECOUPLED, USUAL_DECAY, decay_too_strong
from .facts import Facts, weight_decay_of
from .kind import Details, FindingKind

DOMINATES = 0.5
MIN_SAMPLES = 3
TARGET = 0.05
"""The share the fix aims the decay at: a tenth of ``DOMINATES``."""
_MEASURED = (*DECOUPLED, "SGD")
"""Optimizers whose decay's share of the update this measures."""


@dataclass(slots=True)
class Dominates(Details):
    """The decay's setting, its share of the update, and the factor the fix scales it by."""

    weight_decay: float
    per_step: float
    """The share of every weight the decay takes per step (``lr * wd``, SGD over ``1 - m``)."""
    share: float
    """The median over the weight matrices of the decay's share of the update, ``D``."""
    matrices: int
    total: int
    factor: float
    """A power of 10 that brings ``D`` to about ``TARGET``: the weight_decay the fix sets."""


def _shares(h: History, per_step: float) -> dict[str, list[tuple[int, float]]]:
    """Per weight matrix, (step, D) over the run's second half (its last ``MIN_SAMPLES``
    sampled steps where the cadence left fewer there), the learning rate as it was at each
    step (a schedule lowers the decay with it)."""
    base = h.lr.values[0] if h.lr.values else None
    lr_at = dict(zip(h.lr.steps, h.lr.values))
    out = {}
    for p in weight_params(h):
        w, u = h.param(p.name, "weight_norm"), h.param(p.name, "update_norm")
        norms = dict(zip(w.steps, w.values))
        found = []
        for s, du in zip(u.steps, u.values):
            wn, lr = norms.get(s), lr_at.get(s, base)
            if s == 0 or wn is None or not du or not base or lr is None:
                continue
            d = per_step * (lr / base) * wn / du
            if math.isfinite(d):
                found.append((s, d))
        late = second_half(h, found, MIN_SAMPLES)
        if late is not None:
            out[p.name] = late
    return out


class WeightDecayDominates(FindingKind):
    """The weight decay outweighs the gradient in what moves the weights."""

    name = "weight_decay_dominates"
    setup = True
    link = -1  # a setting made before the first step: the first link of what follows it
    harm = (
        "The mechanism itself: on a weight decay 10x beyond the usual one for its optimizer, at "
        "least half of what moves the weights (the update's norm) is the decay's pull."
    )
    example_details = Dominates(
        weight_decay=10.0, per_step=0.01, share=1.5, matrices=3, total=3, factor=0.01
    )

    def check(self, h: History) -> list[Finding]:
        if len(h.meta.optimizers) != 1:
            return []
        decay, optimizer = weight_decay_of(h), optimizer_type(h)
        if decay is None or optimizer not in _MEASURED or not decay_too_strong(decay, optimizer):
            return []
        wd, per_step = decay
        shares = _shares(h, per_step)
        medians = {n: statistics.median(d for _, d in v) for n, v in shares.items()}
        over = [n for n, d in medians.items() if d >= DOMINATES]
        if not shares or len(over) * 2 < len(shares):
            return []
        share = statistics.median(medians.values())
        factor = 10.0 ** math.floor(math.log10(TARGET / share))
        first = min(s for n in over for s, d in shares[n] if d >= DOMINATES)
        d = Dominates(wd, per_step, share, len(over), len(shares), factor)
        return [
            self.found(
                severity="warning",
                step=first,
                summary=(
                    f"the weight decay outweighs the gradient: weight_decay={fmt(wd)} takes "
                    f"{fmt(per_step)} of every weight a step, and over the second half of the "
                    f"run its pull was {fmt(share)}x the norm of the update (median; at least "
                    f"{DOMINATES:g}x on {len(over)} of {len(shares)} weight matrices): the "
                    "gradient's step and the decay nearly cancel"
                ),
                evidence=[
                    Evidence("weight_decay", fmt(wd), type="code"),
                    Evidence("share of every weight the decay takes a step", fmt(per_step)),
                    Evidence("the decay's pull / the update's norm (second half)", fmt(share)),
                    Evidence(
                        "weight matrices where it reached " + f"{DOMINATES:g}x",
                        f"{len(over)} of {len(shares)}",
                    ),
                ],
                details=d,
            )
        ]

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        d = Dominates.of(f.details)
        f.symptom = (
            "the weights sit where the weight decay holds them: the step the gradient asks for "
            "and the decay's pull cancel"
        )
        usual = USUAL_DECAY[facts.optimizer in DECOUPLED]
        strong = Hypothesis(
            Family.REGULARIZATION,
            f"weight decay far too strong (weight_decay={fmt(d.weight_decay)}, usual at most "
            f"{fmt(usual)} for {facts.optimizer}): it outweighs the gradient",
            f"re-run with weight_decay={fmt(d.weight_decay * d.factor)}: the loss should end "
            "lower, and the decay's share of the update fall below 0.05",
            base=0.4,
        )
        strong.seen(f.summary, Weight.DECISIVE, step=f.step)
        strong.seen(
            f"each step takes {fmt(d.per_step)} of every weight (usual settings: 1e-5 to "
            f"{fmt(DECAY_STRONG / 10)})",
            Weight.STRONG,
        )
        if facts.median_update_ratio is not None:
            f.ruled_out.append(
                RuledOut(
                    "learning rate too low",
                    f"the weights move {fmt(facts.median_update_ratio)} of their norm a step "
                    f"(median): they move, but {fmt(d.share)} of that is the decay's pull",
                )
            )
        f.fixes += [
            Fix(
                Horizon.IMMEDIATE,
                f"lower weight_decay from {fmt(d.weight_decay)} to "
                f"{fmt(d.weight_decay * d.factor)} (AdamW: 0.01-0.1 is usual; SGD: 1e-5 to 5e-4)",
            ),
            Fix(
                Horizon.SHORT_TERM,
                "exclude biases and norm weights from the decay (a parameter group with "
                "weight_decay=0), as nanoGPT and Hugging Face do",
            ),
            Fix(
                Horizon.LONG_TERM,
                "check a config's units where it is read: a decay given as a percentage is 100x "
                "too strong",
            ),
        ]
        f.monitoring.append(
            "lr * weight_decay * ||w|| / ||update|| per layer: the decay's share of the update"
        )
        return [strong]
