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

Harm before alarm: a layer whose inactive share has not changed since the first sample
(within ``STABLE``, 0.1) and stays at most ``AS_BORN`` (75%) is reported as information: the
architecture meeting its data, not units that died (a healthy agent's critic kept 52-55% of a
ReLU layer inactive from its first sample to its last, on states from a narrow
distribution). Units that were alive at a sample and dead later died; a share beyond 75% from
the start is a layer that barely passes anything (biases of -4 in front of the ReLUs left
every unit inactive: ``benchmarks/accuracy.py``'s ``neg_bias``). Both stay warnings. The
dormant-neuron work in reinforcement learning reads the same way: a dormant share that grows
over training is the harm (Sokar et al., ICML 2023, "The dormant neuron phenomenon"). Units
that were alive at a sample and died later, in a run whose one objective still improved
clearly (``signals.improved``), did not stop it learning: information (a Siamese network at
Adam lr 0.1 lost 72% of a layer in its first steps and its loss fell 0.30 to 0.08;
``tests/mechanisms/siamese_startup.py``), or whose loss still fell by a fifth from the step
they were found dead (``STILL``): the VAE of pytorch/examples lost 67% of its first layer by
step 10 (loss 8,687) and went on to 5,157, its published level. A layer dead from its first
sample stays a warning whatever the loss did when it holds at least ``WHOLE`` (95%) of the
layer: it barely passes anything (``benchmarks/accuracy.py``'s ``neg_bias`` transformers
still learn through their residual stream); less, in a run whose one objective improved
clearly, is information: the layer's other units carry the fit (a mixture density network
on a 1-D input whose second ReLU layer was half inactive from its first sample fits as
published). Whatever the loss, in a run whose own measure improved (an agent's return, a
validation metric: ``findings.check_all``) dead units are information: a critic whose loss
grows with the returns is no sign of harm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, RuledOut, Weight
from ..detect.history import History
from ..detect.signals import early_late, fmt, loss_improved
from .advice import LR_TOO_HIGH, grad_jump, loss_jump, lr_fix, update_signs
from .facts import Facts
from .kind import Details, FindingKind

ACTIVE = 0.01
LAYER_SHARE = 0.5
SAMPLES = 3
STABLE = 0.1
AS_BORN = 0.75
WHOLE = 0.95
RELU_FAMILY = ("ReLU", "ReLU6", "Threshold")


def dead_share(units: list[float]) -> float:
    """The share of a layer's units active on fewer than ``ACTIVE`` of the outputs: dead."""
    return sum(1 for u in units if u < ACTIVE) / len(units) if units else 0.0


def relu_family(module_type: str | None, name: str, functional: dict[str, str]) -> bool:
    """Where "dead" means something: a ReLU-family module's output, or a module's output
    that goes through ``F.relu`` (a linear layer's unit below 0 is fine otherwise)."""
    return module_type in RELU_FAMILY or functional.get(name) == "relu"


@dataclass(slots=True)
class Timing(Details):
    """When the layer's units were seen: its first sample, the last one they were alive at."""

    first_sample: int
    alive_until: int | None


def _as_born(samples: dict[int, list[float]], timing: Timing) -> bool:
    """The layer's share of inactive units is what it was at the first sample, within
    ``STABLE``, and leaves most of a layer's units (at most ``AS_BORN``) inactive: the
    architecture meeting its data (a narrow input distribution, a ReLU after a layer whose
    outputs are half negative), not units that died. Harm is a share that grows, or one so
    large that the layer barely passes anything (a negative bias at initialisation)."""
    if timing.alive_until is not None:
        return False  # alive at some sample, dead later: they died
    shares = [dead_share(u) for u in samples.values() if u]
    return bool(shares) and max(shares) - min(shares) <= STABLE and max(shares) <= AS_BORN


STILL = 0.8
"""Units that died in a run whose loss, from the step they were found dead, still fell to at
most this share of it (the median of its last quarter) did not stop it learning."""


def _fell_after(h: History, step: int) -> tuple[float, float] | None:
    """(the loss at ``step``, the median of its last quarter) where it fell to at most
    ``STILL`` of it after: the model went on learning; None where it stalled or rose, or the
    loss was read on too few steps."""
    if not h.loss_covered:
        return None
    at = next((v for s, v in zip(h.loss.steps, h.loss.values) if s >= step), None)
    values = [v for v in h.loss.values if math.isfinite(v)]
    if at is None or not math.isfinite(at) or at <= 0 or len(values) < 20:
        return None
    late = early_late(values)[1]
    return (at, late) if 0 < late <= STILL * at else None


def _information(flagged: tuple[str, int, float, int, Timing], h: History) -> Finding:
    name, first, share, width, timing = flagged
    return Finding(
        kind="dead_units",
        severity="info",
        step=first,
        layer=name,
        summary=(
            f"{share:.0%} of the {width} units of {name} are inactive, as they were at the "
            "first sample: the architecture meeting its data, not units that died"
        ),
        evidence=[Evidence("share of units active on < 1% of positions", round(share, 3))],
        details=timing,
    )


class DeadUnits(FindingKind):
    """Most units of a ReLU layer output 0 for every input.

    Two causes claim different times: an initialisation (a negative bias) kills units before
    any update, a learning rate kills them with a jump. Each claim is checked against the
    samples of that time (the detector's ``first_sample``, ``alive_until``)."""

    name = "dead_units"
    harm = (
        "A layer that barely passes anything, or units that died while the loss did not improve "
        "clearly. Units that died in a run whose one objective still halved are information."
    )
    caused_by = (
        "accumulating_gradients",
        "loss_blowup",
        "exploding_gradients",
        "loss_divergence",
    )
    considers_zero_init = True
    proxy = True
    link = 80

    example_details = Timing(first_sample=0, alive_until=None)

    def harmless(self, f: Finding, h: History) -> str | None:
        d = Timing.known(f.details)
        objectives = h.objectives
        if d is None or len(objectives) != 1 or not objectives[0].judged:
            return None
        if d.alive_until is not None and f.step is not None:  # they died: did the loss stall?
            after = _fell_after(h, f.step)
            if after is not None:
                return (
                    f"the units died after step {d.alive_until}, and the loss still fell from "
                    f"{fmt(after[0])} at step {f.step} to {fmt(after[1])}, so this did not "
                    "stop the model learning"
                )
        better = loss_improved(h)
        if better is None:
            return None
        if d.alive_until is None:  # dead from the first sample
            share = f.evidence[0].value if f.evidence else None
            if not isinstance(share, float) or share >= WHOLE:
                return None  # a layer that barely passes anything
            return (
                f"{share:.0%} of the layer was inactive from the first sample (step "
                f"{d.first_sample}), and the loss still fell from {fmt(better[0])} to "
                f"{fmt(better[1])}: its other units carry the fit"
            )
        return (
            f"the units died after step {d.alive_until}, and the loss still fell from "
            f"{fmt(better[0])} to {fmt(better[1])}, so this did not stop the model learning"
        )

    def earliest(self, f: Finding) -> int | None:
        d = Timing.known(f.details)
        return d.alive_until + 1 if d is not None and d.alive_until is not None else None

    def check(self, h: History) -> list[Finding]:
        flagged = []
        functional = h.meta.functional_activations
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
            timing = Timing(steps[0], alive[-1] if alive else None)
            flagged.append(
                (m.name, first, dead_share(samples[steps[-1]]), len(samples[steps[-1]]), timing)
            )
        if not flagged:
            return []
        harmful = [f for f in flagged if not _as_born(h.units[f[0]], f[4])]
        if not harmful:
            return [_information(flagged[0], h)]
        flagged = harmful
        name, first, share, width, timing = flagged[0]
        others = [f[0] or "(model)" for f in flagged[1:]]
        behind = " (its output goes through F.relu)" if functional.get(name) == "relu" else ""
        return [
            self.found(
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

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        if f.severity == "info":
            f.symptom = (
                f"{f.layer}'s share of inactive units has not changed since the first sample"
            )
            return []
        f.symptom = f"most units of {f.layer} output 0 for every input, so they never learn"
        bias = Hypothesis(
            Family.INITIALIZATION,
            "a negative bias or initialisation that puts units below zero from the start",
            "print the layer's bias and pre-activation mean at step 0",
            base=0.2,
        )
        lr = Hypothesis(
            Family.LEARNING_RATE,
            "a learning rate high enough to knock units into the dead zone",
            "re-run with a lower learning rate and watch the dead share over time",
            base=0.15,
        )
        d = Timing.of(f.details)
        first, alive = d.first_sample, d.alive_until
        if f.step == 0:
            bias.seen(
                "the units were dead at the first sample (step 0), before training moved them",
                Weight.STRONG,
                step=0,
            )
            lr.against("the units were dead before any update", Weight.STRONG, step=0)
            f.ruled_out.append(
                RuledOut(
                    LR_TOO_HIGH,
                    "the units were already dead at step 0, before any update",
                )
            )
        elif alive is not None:
            bias.against(
                f"the units were alive at step {alive} and dead from step {f.step}: they died "
                "in training",
                Weight.STRONG,
                step=alive,
            )
        else:
            bias.unseen(
                f"the units at step 0 (the first activation sample is at step {first})", step=first
            )
        if f.step != 0:
            jump = grad_jump(h, f.step, facts)
            rise = loss_jump(h, f.step)
            if jump is not None:
                lr.seen(
                    f"the gradient norm jumped {fmt(jump[1])}x its median at step {jump[0]}, "
                    "before "
                    f"the units were found dead at step {f.step}",
                    Weight.STRONG,
                    step=jump[0],
                )
            if rise is not None:
                lr.seen(
                    f"the loss rose {fmt(rise[1])}x its first value by step {rise[0]}, before the "
                    "units were found dead",
                    Weight.MODERATE,
                    step=rise[0],
                )
            if jump is None and rise is None:
                lr.against(
                    f"neither the loss nor the gradient norm jumped before step {f.step}",
                    Weight.MODERATE,
                )
            update_signs(lr, facts, f)
        f.fixes += [
            Fix(
                Horizon.IMMEDIATE,
                "re-initialise the biases of the layer before it to 0 (or a small positive value "
                "such as 0.01)",
            ),
            Fix(
                Horizon.SHORT_TERM, "use LeakyReLU/GELU, or put BatchNorm/LayerNorm before the ReLU"
            ),
            Fix(
                Horizon.LONG_TERM,
                "monitor the dead share per layer and lower the learning rate if it grows during "
                "training",
            ),
        ]
        if lr.score > bias.score:
            f.fixes.insert(0, lr_fix(0.1, "lower the learning rate by 10x"))
        f.monitoring.append("share of units active on < 1% of inputs, per ReLU layer")
        return [bias, lr]
