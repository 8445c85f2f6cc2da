"""loss_spike: the loss jumps far above its recent level for a moment, then comes back.

Needs: the per-step loss (per sample when it is a sum over samples; see
``signals.loss_trend``).

Rule: against the previous ``WINDOW`` (128) finite losses, a step is a spike when its
rolling z-score exceeds ``Z`` (6, as in OLMo-core) and it is at least 25% above the
window's median, or when it is at least ``RATIO`` (10) times the median of the last
``RECENT`` (16) losses (Megatron-LM's rule, against the recent level: a loss still falling
from 3.0 to 0.3 has a 128-step median twice its level, and a mislabelled batch at 4.3
was no spike against it; benchmarks/accuracy.py, calibration split, decoder:bad_batch).
A spike needs 10 earlier steps, and the loss must come back below twice the window's
median within ``RECOVER`` (50) steps; a loss that stays up is a divergence instead. The
ratio rule needs a loss with a scale: one that is <= 0 anywhere in the run (an
actor-critic's or a policy gradient's, whose median sits near 0) is judged by the z-score
alone, as ``loss_blowup`` leaves such losses alone, and how far its spike strays is
measured as its noise is (``signals.excursion``: the distance from the median over the
median magnitude) (``../shared/real-programs`` actor_critic_cartpole_healthy: 0.337
against a recent median of 0.0047 is "71.6x", at a z-score of -0.1; 1.88 against 0.0375,
z 20, strays 5x its ordinary excess, not 7).

Harm: a spike of a positive loss must reach ``SETTLED`` (1%) of the loss's level over its
first 10 steps. A classifier that has converged to 1e-5 and jumps to 1.4e-4 (19x) is
still 10,000 times below where it began: rounding at convergence, not a step that hurt
(tests/shapes/eval_left_on.py --train-mode: 0.000138 at step 109 against 1.33 at step 0).

Noise: a spike must also stand out of the run's own noise (``signals.stands_out``: its
excess over the recent median more than 7x that of the run's 95th-percentile excursion). A
batch-mean loss strays 1.0-1.6x (a 10x spike stands out); an actor-critic's loss or a
polynomial fit by SGD strays 8-9x on 1 step in 20, and their largest excursions, 35x and 32x,
are its tail, not events (``../shared/real-programs`` actor_critic_cartpole_healthy,
regression_manual_sgd_healthy). A step whose loss covered 3x
(``MORE_SAMPLES``) the samples of the steps before it (the forwards of its batch: a long
episode of a loss summed over the episode) is a larger sum, not a spike
(tests/shapes/ppo_healthy.py: 37 against a median of 0.27, on a 60-step episode after
episodes of 2-5).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ..detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, RuledOut, Weight
from ..detect.history import History
from ..detect.signals import excursion, fmt, loss_noise, loss_trend, stands_out
from .advice import at, clip_fix, noise_note, update_signs
from .facts import Facts
from .kind import Details, FindingKind

WINDOW = 128
Z = 6.0
RATIO = 10.0
RECOVER = 50
MIN_HISTORY = 10
SETTLED = 0.01
"""A spike must reach this share of the loss's level over its first steps (see Harm)."""
RECENT = 16
MORE_SAMPLES = 3.0


def _more_samples(counts: dict[int, float], step: int) -> bool:
    """The step's loss covered ``MORE_SAMPLES`` (3) times the samples (``counts``, per
    step) of the steps before it (a long episode in a loss summed over the episode): a
    larger sum, not a spike."""
    here = counts.get(step)
    before = [n for s in range(step - WINDOW, step) if (n := counts.get(s))]
    if not here or not before:
        return False
    return here >= MORE_SAMPLES * statistics.median(before)


REPEATS = 3
"""Spikes in a run from which they are the optimizer's pattern, not a batch's accident."""


@dataclass(slots=True, kw_only=True)
class Spikes(Details):
    """The run's loss spikes: how many, where, how soon the loss came back, how high."""

    spikes: int
    spike_steps: list[int]
    """The steps of the first 10."""
    back_after: int | None
    """Steps the loss took to come back (None: not measured)."""
    ratio: float | None
    """The first spike's loss over the recent median (None: not measured)."""


class LossSpike(FindingKind):
    """The loss jumped and came back. One spike that returns at once is first of
    all the batch it was computed on; spikes that repeat are the optimizer's."""

    name = "loss_spike"
    harm = (
        "The loss itself: a jump far above its recent level that reached at least 1% of where the "
        "loss began."
    )
    judges_trend = True
    caused_by = (
        "accumulating_gradients",
        "nonfinite",
        "loss_blowup",
        "attention_logit_growth",
        "output_logit_divergence",
    )
    link = 140

    example_details = Spikes(spikes=1, spike_steps=[], back_after=None, ratio=None)

    def until(self, f: Finding) -> int | None:
        d = Spikes.known(f.details)
        if d is None:
            return None
        last = max(d.spike_steps, default=f.step if f.step is not None else 0)
        return last + (d.back_after or 0)

    def check(self, h: History) -> list[Finding]:
        trend, _ = loss_trend(h)
        steps, values = trend.steps, trend.values
        scaled = all(x > 0 for x in values if math.isfinite(x))  # the ratio rule needs a scale
        spikes = []
        for i in range(MIN_HISTORY, len(values)):
            v = values[i]
            window = [x for x in values[max(0, i - WINDOW) : i] if math.isfinite(x)]
            if not math.isfinite(v) or len(window) < MIN_HISTORY:
                continue
            med = statistics.median(window)
            recent = statistics.median(window[-RECENT:])
            mean = statistics.fmean(window)  # pstdev's exact fractions cost 0.3 ms a step
            sd = math.sqrt(statistics.fmean([(x - mean) ** 2 for x in window]))
            z = (v - mean) / sd if sd > 0 else math.inf
            if z > Z and v > 1.25 * med:
                pass
            elif scaled and v >= RATIO * recent:
                med = recent
            else:
                continue
            after = [x for x in values[i + 1 : i + 1 + RECOVER]]
            back = next((j for j, x in enumerate(after) if math.isfinite(x) and x < 2 * med), None)
            if back is not None:  # how far it strays: over its level, or (no scale) as the
                # run's noise is measured on a loss with values <= 0
                strays = v / med if scaled else excursion(v, window, positive=False)
                spikes.append(
                    (steps[i], v, med, z, back + 1, math.inf if strays is None else strays)
                )
        counts = dict(zip(h.samples.steps, h.samples.values))
        spikes = [sp for sp in spikes if not _more_samples(counts, sp[0])]
        start = [x for x in values[:MIN_HISTORY] if math.isfinite(x)]
        if scaled and start:  # a jump that stays far below where the loss began is no harm
            spikes = [sp for sp in spikes if sp[1] >= SETTLED * statistics.median(start)]
        noise = loss_noise(h)
        if noise is not None:  # what the loss does on an ordinary step is no spike
            spikes = [sp for sp in spikes if stands_out(sp[5], noise)]
        if not spikes:
            return []
        step, value, med, z, back, _ = spikes[0]
        grad = h.grad_norm.at(step)
        evidence: list[Evidence] = [
            Evidence("loss at the spike", fmt(value), step=step),
            Evidence("median loss of the previous 128 steps", fmt(med)),
            Evidence("rolling z-score", fmt(z)),
        ]
        if grad is not None:
            evidence.append(Evidence("global gradient norm at the spike", fmt(grad)))
        if len(spikes) > 1:
            evidence.append(
                Evidence(
                    "spikes in the run", len(spikes), extra={"steps": [s[0] for s in spikes[:10]]}
                )
            )
        details = Spikes(
            spikes=len(spikes),
            spike_steps=[s[0] for s in spikes[:10]],
            back_after=back,
            ratio=value / med if med > 0 else math.inf,
        )
        return [
            self.found(
                severity="warning",
                step=step,
                summary=(
                    f"loss spike at step {step}: {fmt(value)}, {fmt(value / med)}x the recent "
                    "median" + (f" ({len(spikes)} spikes in the run)" if len(spikes) > 1 else "")
                ),
                evidence=evidence,
                details=details,
            )
        ]

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        f.symptom = f"the loss jumped at {at(f)} and came back"
        d = Spikes.of(f.details)
        count, back = d.spikes, d.back_after
        batch = Hypothesis(
            Family.DATA,
            "one bad batch (corrupted, mislabelled or extreme inputs)",
            f"log the indices of the batch at {at(f)} and inspect it",
            base=0.2,
        )
        lr = Hypothesis(
            Family.LEARNING_RATE,
            "instability from a learning rate near its limit",
            "re-run with a lower learning rate or a longer warm-up",
            base=0.1,
        )
        if count == 1:
            batch.seen("a single spike in the whole run", Weight.MODERATE)
            lr.against("a learning-rate instability repeats; this happened once", Weight.MODERATE)
        elif count >= REPEATS:
            lr.seen(f"{count} spikes in the run", Weight.MODERATE)
            batch.against(f"{count} spikes: more than one bad batch would explain", Weight.WEAK)
        if back is not None and back <= 2:
            batch.seen(
                f"the loss was back at its level {back} step{'s' if back > 1 else ''} later: the "
                "model was not damaged, the batch was different",
                Weight.STRONG,
                step=f.step,
            )
        elif back is not None:
            lr.seen(f"the loss took {back} steps to come back: the weights were moved", Weight.WEAK)
        update_signs(lr, facts, f)
        noise_note(f, facts)
        f.ruled_out.append(
            RuledOut("loss divergence", "the loss came back to its earlier level within 50 steps")
        )
        if (ratio := d.ratio) is not None and facts.loss_noise is not None:
            f.ruled_out.append(
                RuledOut(
                    "the loss's ordinary noise",
                    f"the spike was {fmt(ratio)}x the recent median; this run's loss strays "
                    f"{fmt(facts.loss_noise)}x on an ordinary step (95th percentile)",
                )
            )
        f.fixes += [
            clip_fix(facts),
            Fix(
                Horizon.SHORT_TERM,
                "validate batches (finite, in range) and skip steps whose loss z-score exceeds 6",
            ),
            Fix(
                Horizon.LONG_TERM,
                "keep checkpoints from before spikes and log batch indices with each step so bad "
                "samples can be found",
            ),
        ]
        f.monitoring += [
            "rolling z-score of the loss (alert above 6)",
            "global gradient norm per step",
        ]
        return [batch, lr]
