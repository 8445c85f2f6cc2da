"""adversarial_imbalance: one side of an adversarial game wins outright and the other stops
learning.

Needs: a run with a generator and a discriminator (``detect.training``: the generator's loss
runs through the discriminator's parameters), each objective's loss.

Rule: the two losses are read together, never alone. A discriminator's loss that rises while
the generator's falls, or a seesaw, is the game working. The harm is a discriminator that
wins outright: over the last quarter of the run its median loss is at most ``WINS`` (0.3)
times its median over the first ``START`` (3) steps, before either side learnt anything
(a discriminator at 100x the rate wins within a few steps), *and* the generator's median loss
is at least ``STARVED`` (2.5) times its own start. A
discriminator that separates every sample saturates its output, and the gradient it hands
the generator vanishes (Goodfellow et al., 2014, section 3; Arjovsky & Bottou, ICLR 2017,
"Towards principled methods for training GANs": a perfect discriminator's gradients vanish
for the generator), which is why the generator's loss climbs. Our healthy ring-of-Gaussians
GAN (``tests/shapes/gan.py``) kept its discriminator at 0.8 of its starting loss with the
generator at 2.1x its own; the discriminator at 100x the learning rate fell to 0.21 with the
generator at 6x.
"""

from __future__ import annotations

import statistics

from ..detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, RuledOut, Weight
from ..detect.history import History
from ..detect.signals import finite, fmt
from ..detect.training import Objective, Training
from .facts import Facts
from .kind import FindingKind

WINS = 0.3
STARVED = 2.5
START = 3
MIN_STEPS = 40


def _levels(o: Objective) -> tuple[float, float] | None:
    """An objective's starting and late median loss (first ``START`` steps, last quarter)."""
    _, values = finite(o.loss)
    if len(values) < MIN_STEPS:
        return None
    start = values[:START]
    late = values[-max(5, len(values) // 4) :]
    return statistics.median(start), statistics.median(late)


def _onset(o: Objective, level: float) -> int | None:
    """The first step from which the loss's 5-step median stays above ``level``."""
    steps, values = finite(o.loss)
    smooth = [statistics.median(values[max(0, i - 4) : i + 1]) for i in range(len(values))]
    onset = None
    for step, v in zip(steps, smooth):
        if v <= level:
            onset = None
        elif onset is None:
            onset = step
    return onset if onset is not None else (steps[0] if steps else None)


def pairs(h: History) -> list[tuple[Objective, Objective]]:
    adversarial = [o for o in h.objectives if o.training is Training.ADVERSARIAL]
    gens = [o for o in adversarial if o.role == "generator"]
    discs = [o for o in adversarial if o.role == "discriminator"]
    return [(g, d) for g in gens for d in discs]


def players(h: History, f: Finding) -> tuple[tuple[Objective, Objective] | None, str, str]:
    """The (generator, discriminator) pair a finding about ``f.objective`` is about, and
    their names (generic words where the pair is not found)."""
    pair = next(((g, d) for g, d in pairs(h) if g.name == f.objective), None)
    if pair is None:
        return None, "the generator", "the discriminator"
    return pair, pair[0].name, pair[1].name


def rates(h: History, pair: tuple[Objective, Objective] | None) -> tuple[float, float] | None:
    """The (generator's, discriminator's) learning rates, when both are known and above 0."""
    if pair is None:
        return None
    g_lr, d_lr = lr_of(h, pair[0]), lr_of(h, pair[1])
    return (g_lr, d_lr) if g_lr and d_lr else None


def lr_of(h: History, o: Objective) -> float | None:
    if not o.optimizers or o.optimizers[0] >= len(h.meta.optimizers):
        return None
    lr = h.meta.optimizers[o.optimizers[0]].get("lr")
    return float(lr) if isinstance(lr, (int, float)) else None


class AdversarialImbalance(FindingKind):
    """One side of an adversarial game wins outright: the discriminator separates every
    sample and the generator, starved of gradient, gets worse."""

    name = "adversarial_imbalance"
    harm = (
        "A game one side won: the discriminator's loss fell to at most 0.3 of its start while the "
        "generator's rose to at least 2.5x its own. Either loss alone is no harm."
    )
    caused_by = ("eval_mode", "large_updates")
    link = 30

    def check(self, h: History) -> list[Finding]:
        found = []
        for g, d in pairs(h):
            gl, dl = _levels(g), _levels(d)
            if gl is None or dl is None or dl[0] <= 0 or gl[0] <= 0:
                continue
            if dl[1] > WINS * dl[0] or gl[1] < STARVED * gl[0]:
                continue
            found.append(
                self.found(
                    severity="error",
                    step=_onset(g, STARVED * gl[0]),
                    objective=g.name,
                    summary=(
                        f"{d.name} wins the game: its loss fell to {fmt(dl[1])} "
                        f"({fmt(dl[1] / dl[0])}x its start {fmt(dl[0])}) while {g.name}'s "
                        f"rose to {fmt(gl[1])} ({fmt(gl[1] / gl[0])}x its start {fmt(gl[0])})"
                    ),
                    evidence=[
                        Evidence(
                            f"{d.name}'s loss, start and late", f"{fmt(dl[0])} -> {fmt(dl[1])}"
                        ),
                        Evidence(
                            f"{g.name}'s loss, start and late", f"{fmt(gl[0])} -> {fmt(gl[1])}"
                        ),
                    ],
                )
            )
        return found

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        pair, g_name, d_name = players(h, f)
        f.symptom = (
            f"{d_name} separates real from generated samples outright and {g_name}'s loss climbs"
        )
        rate = Hypothesis(
            Family.LEARNING_RATE,
            f"{d_name} learns much faster than {g_name}: its learning rate is too high for "
            "the game",
            f"re-run with {d_name}'s learning rate divided by 10 (or equal to {g_name}'s)",
            base=0.2,
        )
        strong = Hypothesis(
            Family.ARCHITECTURE,
            f"{d_name} is too strong for {g_name} (capacity, or several of its steps per "
            f"step of {g_name})",
            f"give {d_name} spectral normalisation or fewer updates per step of {g_name}",
            base=0.1,
        )
        both = rates(h, pair)
        if both is not None:
            g_lr, d_lr = both
            ratio = d_lr / g_lr
            claim = (
                f"{d_name}'s learning rate is {fmt(ratio)}x {g_name}'s ({fmt(d_lr)} vs {fmt(g_lr)})"
            )
            if ratio >= 5:
                rate.seen(claim, Weight.STRONG, value=ratio)
                strong.against(claim + ": the rate, not the capacity, tips the game", Weight.WEAK)
            else:
                rate.against(claim, Weight.MODERATE, value=ratio)
        f.ruled_out.append(
            RuledOut(
                "the discriminator's loss rising means divergence",
                "in a game a discriminator's rising loss is the generator improving; here the "
                "discriminator's loss fell while the generator's rose",
            )
        )
        f.fixes += [
            Fix(
                Horizon.IMMEDIATE,
                f"lower {d_name}'s learning rate (a two time-scale rule keeps it within a "
                f"few x of {g_name}'s)",
            ),
            Fix(
                Horizon.SHORT_TERM,
                f"use one-sided label smoothing (real labels 0.9) or instance noise for {d_name}",
            ),
            Fix(
                Horizon.LONG_TERM,
                f"add spectral normalisation to {d_name}, or a loss whose gradients do not "
                "vanish (non-saturating, hinge, Wasserstein with a gradient penalty)",
            ),
        ]
        f.monitoring.append(
            f"{d_name}'s and {g_name}'s losses side by side (alert when one falls near 0 "
            "while the other climbs)"
        )
        return [rate, strong]
