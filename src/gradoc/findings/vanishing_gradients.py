"""vanishing_gradients: the input-side layers get almost no gradient.

Needs: per-parameter gradient norms.

Rule (AUTOTRAINER, ICSE'21): with the weight matrices in forward order, the ratio of the
first layer's gradient norm to the last layer's is below ``RATIO`` (1e-3) and the first
layer's norm is below ``FIRST_NORM`` (1e-4), on at least half of the recorded steps and
on the last one (a transient dip is not a diagnosis). SageMaker Debugger's rule (mean
|gradient| < 1e-7) is reported as evidence: the first layer's RMS gradient.

Calibration: a 12-layer sigmoid MLP gives a ratio of ~1e-9; healthy runs stay above 0.05
(a transformer's embedding vs its head: ~0.1). At least 3 weight matrices are needed.
"""

from __future__ import annotations

import math
import statistics

from ..detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, RuledOut, Weight
from ..detect.history import History
from ..detect.signals import fmt, weight_params
from .advice import init_advice, related
from .facts import Facts
from .kind import FindingKind

RATIO = 1e-3
FIRST_NORM = 1e-4
MIN_LAYERS = 3


def _weight_gain(init: Hypothesis, facts: Facts) -> None:
    """Whether the weights' own scale at the start explains a gradient lost through depth:
    each matrix scales the gradient passing back through it by ``||W|| / sqrt(fan-in)``;
    a variance-preserving initialisation makes that 1 (sqrt(2) in front of a ReLU, which
    halves the variance). Seen when the product alone falls below the detector's ratio;
    contradicted when it loses less than 10x."""
    gains = facts.weight_gains or []
    if len(gains) < MIN_LAYERS:
        init.unseen("the weights' scale at the start (too few weight matrices recorded)")
        return
    g = statistics.median(gains)
    keep, relu = (math.sqrt(2), " for ReLU layers") if facts.relu_like else (1.0, "")
    depth = len(gains) - 1  # the matrices between the last layer's gradient and the first's
    product = (g / keep) ** depth
    scale = (
        f"at the start each weight matrix scales the gradient passing back through it by "
        f"~{fmt(g)}, the median of ||W||/sqrt(fan-in), where {fmt(keep)} keeps it{relu}"
    )
    if product < RATIO:
        init.seen(
            f"{scale}; across {depth} matrices that is {fmt(g / keep)}^{depth} = "
            f"{fmt(product)}, enough by itself to lose the gradient",
            Weight.STRONG,
            step=0,
        )
    elif product >= 0.1:
        init.against(
            f"{scale}; across {depth} matrices it loses at most 10x", Weight.STRONG, step=0
        )
    else:
        init.unseen(f"{scale}; across {depth} matrices {fmt(product)}", step=0)


class VanishingGradients(FindingKind):
    """The input-side layers get almost no gradient."""

    name = "vanishing_gradients"
    harm = (
        "A statistic: small gradients at the input are a warning unless the run's one objective "
        "still improved clearly (halved), when they are information."
    )
    statistic = True
    caused_by = ("dead_units", "saturated_units", "loss_blowup", "loss_divergence")
    considers_zero_init = True
    link = 60

    def check(self, h: History) -> list[Finding]:
        ws = weight_params(h)
        if len(ws) < MIN_LAYERS:
            return []
        first, last = ws[0], ws[-1]
        g_first, g_last = h.param(first.name, "grad_norm"), h.param(last.name, "grad_norm")
        last_by_step = dict(zip(g_last.steps, g_last.values))
        flagged: list[int] = []
        ratios: list[float] = []
        checked = 0
        for s, gf in zip(g_first.steps, g_first.values):
            gl = last_by_step.get(s)
            if gl is None or not (math.isfinite(gf) and math.isfinite(gl)) or gl <= 0:
                continue
            checked += 1
            if gf / gl < RATIO and gf < FIRST_NORM:
                flagged.append(s)
                ratios.append(gf / gl)
        if not checked or len(flagged) * 2 < checked or flagged[-1] != g_first.steps[-1]:
            return []
        numel = math.prod(first.shape or (1,))
        rms = g_first.at(flagged[-1]) or 0.0
        return [
            self.found(
                severity="warning",
                step=flagged[0],
                layer=first.module,
                summary=(
                    f"vanishing gradients: {first.name} gets {fmt(ratios[-1])}x the gradient of "
                    f"{last.name} ({len(flagged)} of {checked} steps)"
                ),
                evidence=[
                    Evidence(f"grad norm {first.name} / grad norm {last.name}", fmt(ratios[-1])),
                    Evidence(f"grad norm of {first.name}", fmt(g_first.values[-1])),
                    Evidence(f"RMS gradient of {first.name}", fmt(rms / math.sqrt(numel))),
                    Evidence(
                        "steps with the ratio below 1e-3", len(flagged), extra={"of": checked}
                    ),
                ],
            )
        ]

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        f.symptom = "the input-side layers get almost no gradient, so they barely learn"
        sat = Hypothesis(
            Family.ARCHITECTURE,
            "saturating activations (sigmoid/tanh) repeated through depth",
            "swap the activation for ReLU/GELU and compare the first layer's gradient norm",
            base=0.2,
        )
        init = Hypothesis(
            Family.INITIALIZATION,
            "initialisation too small for the depth",
            "print each layer's output std at step 0: it should not shrink layer after layer",
            base=0.15,
        )
        dead = Hypothesis(
            Family.GRADIENTS,
            "dead ReLU units blocking the gradient",
            "look at the per-unit activity of the ReLU layers (run.unit_active)",
            base=0.1,
        )
        if facts.saturating:
            sat.seen(
                f"the model uses {', '.join(facts.saturating)} across {facts.depth} layers",
                Weight.MODERATE,
            )
            sigmoids = sum(1 for m in h.modules if m.type == "Sigmoid")
            if sigmoids >= 3:
                sat.seen(
                    f"sigmoid's derivative is at most 0.25: {sigmoids} sigmoid layers scale the "
                    f"gradient by at most 0.25^{sigmoids} = {fmt(0.25**sigmoids)}",
                    Weight.STRONG,
                )
        else:
            sat.against("the model has no sigmoid/tanh-family module", Weight.STRONG)
        if (poor := related(f, "poor_initialization")) is not None:
            init.seen(poor.summary, Weight.STRONG, step=poor.step)
        _weight_gain(init, facts)
        if (dying := related(f, "dead_units")) is not None:
            dead.seen(dying.summary, Weight.STRONG, step=dying.step)
        elif facts.relu_like:
            dead.against("no ReLU layer has a majority of dead units", Weight.MODERATE)
        else:
            dead.against("the model has no ReLU-family module", Weight.STRONG)
        last = [p for p in h.params if p.shape and len(p.shape) >= 2]
        if last:
            g = h.param(last[-1].name, "grad_norm").values
            if g and math.isfinite(g[-1]) and g[-1] > 1e-4:
                f.ruled_out.append(
                    RuledOut(
                        "a data or loss problem (nothing to learn)",
                        f"the output layer {last[-1].name} still gets gradient norm {fmt(g[-1])}: "
                        "the signal is lost on the way down",
                    )
                )
        if facts.lr is not None:
            f.ruled_out.append(
                RuledOut(
                    "learning rate too low",
                    f"the learning rate is {fmt(facts.lr)} and the output side learns; a higher "
                    "rate would not reach layers whose gradient is ~0",
                )
            )
        # the fix of the likelier cause comes first; an activation swap only where the model
        # has saturating activations to swap
        first, then = init_advice(facts), None
        if facts.saturating:
            swap = (
                f"switch the hidden {'/'.join(facts.saturating)} activations to ReLU or GELU "
                "(keep sigmoid for gates and outputs)"
            )
            first, then = (swap, first) if sat.score >= init.score else (first, swap)
        f.fixes.append(Fix(Horizon.IMMEDIATE, first))
        if then:
            f.fixes.append(Fix(Horizon.SHORT_TERM, then))
        f.fixes.append(
            Fix(
                Horizon.LONG_TERM,
                "add normalisation and residual connections so gradient has a short path to "
                "the input layers",
            )
        )
        f.monitoring.append(
            "gradient norm of the first and last layer, and their ratio (alert below 1e-3)"
        )
        return [sat, init, dead]
