"""loss_plateau: the loss is not going down: the model is not learning.

Needs: the per-step loss (per sample when it is a sum over samples; see
``signals.loss_trend``).

Rule: with at least ``MIN_STEPS`` (100) finite losses, compare the median of the first 10%
(at least 5 steps) with the median of the last 25%; a plateau is an improvement below
``MIN_GAIN`` (2%) that is not a rise (a rise is a divergence). Calibration: labels
independent of the inputs give 0.7% over 400 steps; healthy runs improve by 12% or more
over the same length. Runs whose loss is already ~0 are left alone. The onset is the
first step of the last 25%: from there on the loss is known not to improve (so a plateau
that follows a blow-up is seen to follow it).

At chance: a cross-entropy over k classes whose last 25% sits within ``CHANCE_BAND`` (3%)
of ln k is a plateau whatever came before: the model predicts the uniform distribution.
A loss that blew up and came back to chance "improved" from its early steps (Adam at lr
3 on a ResNet: 1.7, 3.6, then 1.4-1.6 against ln 4 = 1.39 for 90 steps;
benchmarks/accuracy.py, calibration split, resnet:lr_adam). Converged: a cross-entropy
whose whole run sits below ``CONVERGED`` (0.5) x ln k has learnt what it can and is not
stuck (fine-tuning a trained CNN at a tenth of its learning rate: 0.3-0.4 throughout
against ln 4; calibration split, cnn:healthy:finetune).

Noisy: a loss whose 95th-percentile excursion over its recent median exceeds ``NOISY``
(3x; ``signals.excursions``) measures no 2% gain, unless it sits at chance: an
actor-critic's loss, whose size follows the episodes' returns, not progress
(``../shared/real-programs`` actor_critic_cartpole_healthy: 7.9).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._util.json_types import JsonObject
from ..detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, RuledOut, Weight
from ..detect.history import History
from ..detect.signals import ce_classes, early_late, finite, fmt, loss_noise, loss_trend
from .advice import at_chance, first_update_large, lr_fix, weight_decay
from .facts import Facts
from .kind import Details, FindingKind

MIN_STEPS = 100
MIN_GAIN = 0.02
CHANCE_BAND = 0.03
CONVERGED = 0.5
NOISY = 3.0


BLOCKING = ("dead_units", "vanishing_gradients", "saturated_units", "tiny_updates")


@dataclass(slots=True)
class Plateau(Details):
    """The loss early and late, the run's relative gain, and its chance level if at it."""

    early_loss: float
    """The median of the first 10% of the steps."""
    late_loss: float
    """The median of the last 25%."""
    gain: float
    chance: float | None = None
    """ln(classes), when the loss sits at the chance level of a cross-entropy."""
    classes: int | None = None

    def to_json(self) -> JsonObject:
        out = Details.to_json(self)
        if self.chance is None:  # not at chance: not written
            del out["chance"], out["classes"]
        return out


class LossPlateau(FindingKind):
    """The loss does not go down: the model is not learning."""

    name = "loss_plateau"
    harm = "The loss itself: it did not improve by 2% over the run, or it sits at chance (ln k)."
    judges_trend = True
    caused_by = (
        "accumulating_gradients",
        "eval_mode",
        "zero_clip",
        "loss_on_probabilities",
        "nonfinite",
        "loss_blowup",
        "dead_units",
        "vanishing_gradients",
        "saturated_units",
        "poor_initialization",
        "tiny_updates",
        "loss_divergence",
        "frozen_parameters",
        "adam_epsilon",
    )
    considers_zero_init = True
    link = 150

    example_details = Plateau(math.nan, math.nan, 0.0)  # at no chance level

    def earliest(self, f: Finding) -> int | None:
        """A plateau is the whole run's trend (its first 10% against its last 25%): it may
        have begun at any step, so a blow-up that left the loss at chance explains it."""
        return None

    def check(self, h: History) -> list[Finding]:
        steps, values = finite(loss_trend(h)[0])
        if len(values) < MIN_STEPS:
            return []
        early, late = early_late(values, least=5)
        k = ce_classes(h)
        at_chance = k is not None and abs(late - math.log(k)) <= CHANCE_BAND * math.log(k)
        if abs(early) < 1e-6 or (late > 1.5 * early and not at_chance):
            return []
        gain = (early - late) / abs(early)
        if gain >= MIN_GAIN and not at_chance:
            return []
        if k is not None and max(early, late) < CONVERGED * math.log(k):
            return []  # learnt, and holding there
        noise = loss_noise(h)
        if not at_chance and noise is not None and noise > NOISY:
            return []  # a loss this noisy measures no 2% gain
        return [
            self.found(
                severity="warning",
                step=steps[-max(5, len(values) // 4)],
                summary=(
                    f"loss plateau: {fmt(early)} at the start, {fmt(late)} over the last "
                    f"{len(values) // 4} steps ({gain:.1%} better in {len(values)} steps)"
                ),
                evidence=[
                    Evidence("median loss, first 10% of steps", fmt(early)),
                    Evidence("median loss, last 25% of steps", fmt(late)),
                    Evidence("relative improvement", round(gain, 4)),
                ],
                details=Plateau(early, late, gain)
                if not (at_chance and k)
                else Plateau(early, late, gain, math.log(k), k),
            )
        ]

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        f.symptom = "the loss does not go down: the model is not learning"
        data = Hypothesis(
            Family.DATA,
            "inputs and labels that carry no learnable relation (misaligned or shuffled labels, "
            "wrong target column)",
            "train on a single batch: a working pipeline overfits it within ~100 steps",
            base=0.2,
        )
        low = Hypothesis(
            Family.LEARNING_RATE,
            "learning rate too low",
            "re-run with the learning rate 10x higher",
            base=0.15,
        )
        blocked = Hypothesis(
            Family.GRADIENTS,
            "gradient blocked inside the model (dead or saturated units, vanishing)",
            "check the other findings and per-layer gradient norms",
            base=0.1,
        )
        high = Hypothesis(
            Family.LEARNING_RATE,
            "learning rate too high: the first updates threw the model out of its basin and it "
            "settled where it learns nothing",
            "re-run with the learning rate divided by 10: the loss should fall from the start",
            base=0.05,
        )
        if facts.early_peak_loss is not None:
            high.seen(
                f"the loss rose to {fmt(facts.early_peak_loss)} in the first steps, from "
                f"{fmt(h.loss.values[0])}",
                Weight.STRONG,
            )
            low.against("the loss rose in the first steps: the updates were too big", Weight.STRONG)
        large = first_update_large(facts)
        if large is not None:
            high.seen(large, Weight.MODERATE)
        k = at_chance(Plateau.of(f.details).late_loss, h)
        if (
            k is not None
        ):  # learnt nothing: every cause of a plateau predicts it, so it weighs little
            data.seen(
                f"the loss sits at {fmt(math.log(k))} = ln({k}): chance for {k} classes",
                Weight.WEAK,
            )
        if facts.median_update_ratio is not None:
            claim = f"median update/weight ratio {fmt(facts.median_update_ratio)} (healthy ~1e-3)"
            if facts.median_update_ratio < 1e-5:
                low.seen(claim, Weight.STRONG)
            elif facts.median_update_ratio > 1e-4:
                low.against(claim, Weight.MODERATE)
        causes = [r for r in f.related if r.kind in BLOCKING]
        ungated = sorted(facts.module_types & {"RNN", "RNNCell"})
        through_time = Hypothesis(
            Family.ARCHITECTURE,
            "an ungated recurrence: gradients vanish through time, so what a long sequence starts "
            "with never reaches the loss",
            "train a gated cell (LSTM/GRU) or shorter sequences on the same data: a drop in the "
            "loss confirms it",
            base=0.1,
        )
        if ungated:
            through_time.seen(
                f"the model has ungated recurrent layers ({', '.join(ungated)})", Weight.MODERATE
            )
            f.fixes.append(
                Fix(
                    Horizon.SHORT_TERM,
                    "replace the vanilla RNN with an LSTM or GRU (forget-gate bias ~1-3), and clip "
                    "the gradient norm",
                )
            )
        if causes:
            for r in causes:
                blocked.seen(str(r.summary), Weight.STRONG, step=r.step)
        elif not facts.outputs_seen:  # what was not watched is no evidence either way
            blocked.unseen(
                "dead or saturated units: the modules' outputs were not watched (inside a "
                "torch.compile'd model no per-module hook runs)"
            )
        elif not ungated:  # the layer ratio does not see vanishing through time
            blocked.against("no dead, saturated or vanishing layer was found", Weight.MODERATE)
            f.ruled_out.append(
                RuledOut(
                    "dead ReLUs or vanishing gradients",
                    "no layer has a majority of dead units and the first/last gradient ratio "
                    "stayed above 1e-3",
                )
            )
        if not (causes or facts.early_peak_loss or ungated or not facts.outputs_seen):
            data.seen(
                "nothing inside the model blocked learning (no dead, saturated or vanishing layer)",
                Weight.WEAK,
            )
        f.fixes += [
            Fix(Horizon.IMMEDIATE, "overfit one batch to check that inputs and labels line up"),
            Fix(Horizon.SHORT_TERM, "raise the learning rate (a range test finds the best one)"),
            Fix(
                Horizon.LONG_TERM,
                "add a validation metric against a trivial baseline (majority class) to see "
                "learning start",
            ),
        ]
        f.monitoring += ["loss against the trivial baseline", "update/weight ratio per layer"]
        if high.confirmed:
            f.fixes.insert(0, lr_fix(0.1, "lower the learning rate by 10x"))
        decay = weight_decay(f, facts, high)
        return (
            [data, low, blocked, high]
            + ([through_time] if ungated else [])
            + ([decay] if decay else [])
        )
