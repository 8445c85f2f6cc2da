"""saturated_units: sigmoid/tanh-family outputs stuck at their bounds, passing no gradient.

Needs: per-module saturated fraction (the share of outputs whose local derivative is
below 1% of its peak: tanh |x| > 2.99, sigmoid |x| > 5.99 in pre-activation terms).

Rule (DeepDiagnosis, ICSE'22: saturation when > 50% of pre-activations have |x| >= 5):
a layer is flagged when its saturated fraction exceeds ``SHARE`` (50%) on at least half of
its activation samples and on the last one. Our cut-off is the derivative one above
(stricter for sigmoid, looser for tanh than |x| >= 5); SageMaker Debugger's tanh ±9.5 and
sigmoid (-23, 17) flag only complete saturation.
"""

from __future__ import annotations

from ..detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, Weight
from ..detect.history import History
from .advice import init_advice, loss_jump
from .facts import Facts
from .kind import FindingKind

SHARE = 0.5


class SaturatedUnits(FindingKind):
    """Sigmoid/tanh outputs at the flat ends, passing no gradient."""

    name = "saturated_units"
    harm = (
        "A statistic: saturated units are a warning unless the run's one objective still improved "
        "clearly (halved), when they are information."
    )
    statistic = True
    caused_by = (
        "loss_blowup",
        "loss_divergence",
        "exploding_gradients",
        "poor_initialization",
    )
    considers_zero_init = True
    link = 90

    def check(self, h: History) -> list[Finding]:
        flagged = []
        for m in h.modules:
            sat = h.act(m.name, "sat_frac")
            if not sat.values:
                continue
            over = [s for s, v in zip(sat.steps, sat.values) if v > SHARE]
            if len(over) * 2 >= len(sat.values) and sat.values[-1] > SHARE:
                flagged.append((m.name, m.type, over[0], sat.values[-1]))
        if not flagged:
            return []
        name, mtype, first, share = flagged[0]
        others = [f[0] for f in flagged[1:]]
        return [
            self.found(
                severity="warning",
                step=first,
                layer=name,
                summary=(
                    f"saturated units: {share:.0%} of the outputs of {name} ({mtype}) sit where "
                    "the gradient is < 1% of its peak"
                    + (f" (also {', '.join(others)})" if others else "")
                ),
                evidence=[
                    Evidence(
                        f"saturated fraction of {n} ({t})", round(v, 3), step=s, type="distribution"
                    )
                    for n, t, s, v in flagged
                ],
            )
        ]

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        f.symptom = (
            f"the outputs of {f.layer} sit at the flat ends of the activation, passing no gradient"
        )
        init = Hypothesis(
            Family.INITIALIZATION,
            "pre-activations too large because of the initialisation scale",
            "print the std of the layer feeding it at step 0: above ~2 saturates tanh",
            base=0.2,
        )
        inputs = Hypothesis(
            Family.DATA,
            "unnormalised inputs",
            "print the mean and std of a batch of inputs",
            base=0.15,
        )
        if f.step == 0:
            init.seen("saturated at the first sample (step 0)", Weight.STRONG, step=0)
            inputs.seen(
                "saturated at the first sample, on the inputs as given", Weight.MODERATE, step=0
            )
        else:
            init.unseen("saturation at step 0 (it was found later)")
            if (rise := loss_jump(h, f.step)) is not None:
                init.against(
                    f"the loss rose {rise[1]:.3g}x by step {rise[0]} before: training drove it "
                    "there",
                    Weight.MODERATE,
                )
        f.fixes += [
            Fix(Horizon.IMMEDIATE, init_advice(facts)),
            Fix(
                Horizon.SHORT_TERM,
                "normalise the inputs and add LayerNorm/BatchNorm before the activation",
            ),
            Fix(
                Horizon.LONG_TERM,
                "prefer ReLU/GELU hidden activations; keep sigmoid for gates and outputs",
            ),
        ]
        f.monitoring.append("saturated fraction of sigmoid/tanh outputs (alert above 50%)")
        return [init, inputs]
