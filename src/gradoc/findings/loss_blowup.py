"""loss_blowup: the loss rose far above where it started, whether or not it came back.

Needs: the per-step loss (per sample when it is a sum over samples; see
``signals.loss_trend``).

Rule: the start level is the lowest of the first ``START`` (3) finite losses, so one
noisy first batch does not set it high; the rise is looked for after that step, and
smoothed over steps from it only (a regression loss falling 0.40 → 0.058 in two steps,
then 0.16 once, is no rise because the 0.40 came first: the ``train.py`` of the docs'
gradoc run page). A rise right after step 0 counts (SGD at lr 50: 1.45, then 4e8, then
NaN). The loss is smoothed with a rolling median of
``SMOOTH`` (3) steps, so that one bad batch stays a spike (``loss_spike``). The loss blows
up at the first step where the smoothed loss exceeds ``RISE`` (2x) the start level and
stays above it for ``SUSTAIN`` (3) smoothed steps. A single finite loss at or above
``FLOOR`` (100x) the start level counts, unless the loss is back within ``SUSTAIN`` steps:
then it is a spike, and ``loss_spike`` reports it (a run whose loss went 100x above where it
started is never healthy). Losses at or below 0 (log-likelihood objectives, RL
returns) have no scale to compare with and are left alone.

Where the numbers come from: the learning-rate range test (Smith, "Cyclical Learning
Rates", 2017; fastai's ``lr_find`` stops once the loss passes 4x its best) reads the
learning rate that is too high where the loss starts to climb instead of fall; a
healthy run's loss only falls from its start, so twice the start, held for three
smoothed steps, is already past what noise does (the healthy calibration runs, batches
of 8 with label noise included, stay below 1.3x). A blow-up may come back — Adam at lr
3.0 took a 4-class MLP from 1.4 to 1e5 and back to exactly chance, ln 4, with dead
units — which ``loss_divergence`` (a loss that stays up) does not see.

Harm: a blow-up that came back within ``TRANSIENT`` (10) steps of its onset, on a loss that
ended at most half of where it started (the run clearly better for it), is information: Adam's
first steps overshooting once at start-up (a Siamese network's contrastive loss 0.20 to 2.4 at
step 1, back by step 4, ending at 0.03; ``tests/mechanisms/siamese_startup.py``). A loss that
came back to about where it began (minGPT's adder at lr x1000: 2.3 to 34, then stuck at 2.1)
or stayed up keeps its error.

Noise: the rise must stand out of the run's own noise outside the event
(``signals.stands_out``): a one-weight regression fit one sample a step rose 19.5x from its
first loss, and its ordinary excursion is 19x (tests/shapes/one_weight_regression.py). On
such a loss (an ordinary excursion outside the event of ``NOISY``, 5x, or more: the rise
itself is left out, or an Adam blow-up's wild swings would read as noise), or one whose
start is ``LUCKY`` (10x) below its first loss, the start level is the median of the losses
before the rise (at most the first 8), not the lowest of the first 3: a healthy sequence
regression fit one sequence a step started at 0.005 by luck (the median of the two losses
before its "rise": 0.032), and an ordinary sample of 2.35 read as 473x, past the 100x that
always stands out (tests/test_harm.py has its shape). Adam at lr 3 (1.36, then 86,380)
keeps its start: nothing came before its rise.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import NamedTuple

from ..detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, RuledOut, Weight
from ..detect.history import History
from ..detect.signals import (
    IMPROVED,
    NOISE_WINDOW,
    ce_classes,
    excursions,
    fmt,
    loss_trend,
    stands_out,
)
from .advice import (
    at,
    at_chance,
    clipping,
    first_update_large,
    lr_fix,
    lr_too_high,
    noise_note,
    pinned,
    update_signs,
    warming,
    warmup_fix,
    weight_decay,
)
from .facts import Facts
from .kind import Details, FindingKind

START = 3
SMOOTH = 3
RISE = 2.0
SUSTAIN = 3
FLOOR = 100.0
BACK = 1.5
"""The loss has come back once the smoothed loss is below 1.5x the start level again."""
TRANSIENT = 10
"""Steps from the onset within which a blow-up that came back was a start-up transient."""
NOISY = 5.0
"""A loss whose ordinary excursion outside the event (``signals.excursions``) reaches this is
one sample's or one episode's (a batch mean's is about 1.3): its start level is the median of
its losses before the rise (at most the first ``NOISE_WINDOW``, 8), not the lowest of the
first 3, which is a lucky sample's."""
LUCKY = 10.0
"""A start level this many times below the first loss, one or two steps into the run, is a
lucky sample's too (the event may never come back, leaving no noise outside it to measure)."""


@dataclass(slots=True, kw_only=True)
class Blowup(Details):
    """The loss's rise: where it started, its peak, whether and when it came back."""

    start_loss: float
    peak_loss: float
    peak_step: int
    peak_ratio: float
    came_back_at: int | None
    end_loss: float
    """The median of the last 10% of the steps; NaN/Inf when the loss was so to the end."""
    per_sample: bool
    """Read from the per-sample losses (the batch mean's noise is not the loss's)."""


class LossBlowup(FindingKind):
    """The loss rose far above where it started and stayed up for a while."""

    name = "loss_blowup"
    judges_trend = True
    caused_by = (
        "accumulating_gradients",
        "eval_mode",
        "loss_unbounded",
        "nonfinite",
        "exploding_gradients",
        "loss_divergence",
        "attention_logit_growth",
        "output_logit_divergence",
    )
    link = 50
    example_details = Blowup(
        start_loss=1.0,
        peak_loss=100.0,
        peak_step=0,
        peak_ratio=100.0,
        came_back_at=None,
        end_loss=math.nan,  # not at any chance level
        per_sample=False,
    )

    harm = (
        "The loss far above where it started and stayed up, or came back no lower than about "
        "where it began. One back within 10 steps, ending at most half its start, is "
        "information."
    )

    def until(self, f: Finding) -> int | None:
        d = Blowup.known(f.details)
        return d.came_back_at if d is not None else None

    def harmless(self, f: Finding, h: History) -> str | None:
        d = Blowup.known(f.details)
        if d is None or d.came_back_at is None or f.step is None:
            return None
        if d.came_back_at - f.step > TRANSIENT or not d.end_loss <= IMPROVED * d.start_loss:
            return None
        return (
            f"a transient, back by step {d.came_back_at}; the loss then fell to "
            f"{fmt(d.end_loss)}, below its start of {fmt(d.start_loss)}"
        )

    def check(self, h: History) -> list[Finding]:
        series, per_sample = loss_trend(h)
        pairs = [(s, v) for s, v in zip(series.steps, series.values) if math.isfinite(v)]
        if len(pairs) < 2 or any(
            v < 0 for _, v in pairs
        ):  # 1.45, 30, 2e4, 4e8, then NaN: a blow-up
            return []
        steps, values = [s for s, _ in pairs], [v for _, v in pairs]
        first = min(range(min(START, len(values))), key=values.__getitem__)
        event = _event(steps, values, first)
        lucky = values[first] * LUCKY <= values[0]  # 10x below the first loss at once
        if event is not None and (lucky or (event.noise is not None and event.noise >= NOISY)):
            # one sample's loss (its noise outside the event): its lowest start is luck; the
            # level is the median of the losses before the rise (at most NOISE_WINDOW)
            before = min(NOISE_WINDOW, event.onset)
            event = _event(steps, values, before - 1, median=True) if before > first else event
        if event is None:
            return []
        start, onset, peak_i, back_i, noise = event
        if not stands_out(values[peak_i] / start, noise):
            return []  # within what this run's loss does on its own
        tail = values[-max(3, len(values) // 10) :]
        end = statistics.median(tail)
        nan_from = series.nonfinite_to_the_end()  # it ended NaN: so that is how it ended
        end = series.values[-1] if nan_from is not None else end
        ratio = values[peak_i] / start
        details = Blowup(
            start_loss=start,
            peak_loss=values[peak_i],
            peak_step=steps[peak_i],
            peak_ratio=ratio,
            came_back_at=steps[back_i] if back_i is not None else None,
            end_loss=end,
            per_sample=per_sample,
        )
        came = (
            f", came back by step {steps[back_i]}"
            if back_i is not None
            else " and did not come back"
        )
        ended = (
            f", then was non-finite from step {nan_from} to the last step ({fmt(end)})"
            if nan_from is not None
            else f" and ended at {fmt(end)}"
        )
        unit = " per sample" if per_sample else ""
        return [
            self.found(
                severity="error",
                step=steps[onset],
                summary=(
                    f"loss blow-up from step {steps[onset]}: the loss{unit} rose from "
                    f"{fmt(start)} to {fmt(values[peak_i])} ({fmt(ratio)}x) at step "
                    f"{steps[peak_i]}{came}{ended}"
                ),
                evidence=[
                    Evidence(f"loss{unit} at the start (lowest of the first 3)", fmt(start)),
                    Evidence("peak loss", fmt(values[peak_i]), step=steps[peak_i]),
                    Evidence("peak / start", fmt(ratio)),
                    Evidence(
                        "loss at the end (median of the last 10%)"
                        if nan_from is None
                        else f"loss at the end (non-finite from step {nan_from})",
                        fmt(end),
                    ),
                ],
                details=details,
            )
        ]

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        d = Blowup.of(f.details)
        came_back = d.came_back_at
        f.symptom = f"the loss rose {fmt(d.peak_ratio)}x above where it started, from {at(f)}" + (
            f", and came back by step {came_back}" if came_back is not None else ""
        )
        lr = lr_too_high(
            0.3,
            "re-run with the learning rate divided by 10: the first steps should lower the loss",
        )
        init = Hypothesis(
            Family.INITIALIZATION,
            "weights or output logits initialised too large",
            "print the loss at step 0 and each layer's output std at step 0",
            base=0.1,
        )
        data = Hypothesis(
            Family.DATA,
            "a harder or corrupted stretch of data",
            f"inspect the batches around {at(f)}",
            base=0.1,
        )
        if f.step is not None and f.step <= 20:
            lr.seen(
                f"the loss rose within the first {f.step + 1} steps: a workable learning rate "
                "lowers it from the start",
                Weight.WEAK,
                step=f.step,
            )
        first, large = facts.first_update_ratio, first_update_large(facts)
        if large is not None:
            lr.seen(large, Weight.STRONG, value=first)
        elif first is not None and first < facts.large_ratio / 10 and not warming(h, f.step):
            lr.against(
                f"the first update moved the weights by at most {fmt(first)} of their norm",
                Weight.MODERATE,
            )
        else:
            update_signs(lr, facts, f)
        decayed = pinned(facts)  # a loss the decay holds at chance tells nothing of the rate
        for r in f.related:
            if r.kind == "dead_units":
                lr.seen(f"units died after the blow-up ({r.summary})", Weight.MODERATE, step=r.step)
            elif r.kind == "loss_plateau" and not decayed:
                lr.seen("the loss never got below where the blow-up left it", Weight.MODERATE)
            elif r.kind == "exploding_gradients":
                lr.seen(f"the gradients grew with it ({r.summary})", Weight.WEAK, step=r.step)
        k = at_chance(d.end_loss, h)
        if k is not None:
            f.symptom += f"; it ended at ln({k}), chance level: the model predicts nothing"
        if k is not None and not decayed:
            lr.seen(
                f"the loss ended at chance level, ln({k}) = {fmt(math.log(k))}", Weight.MODERATE
            )
        start_k = ce_classes(h)
        if start_k and d.start_loss > 1.5 * math.log(start_k):
            init.seen(
                f"the loss started at {fmt(d.start_loss)}, above chance (ln({start_k}) = "
                f"{fmt(math.log(start_k))})",
                Weight.MODERATE,
                step=0,
            )
        elif start_k:
            init.against(
                f"the loss started at {fmt(d.start_loss)}, near chance (ln({start_k}))",
                Weight.MODERATE,
                step=0,
            )
        sustained = came_back is None or came_back - (f.step or 0) >= 3
        if sustained:
            data.against(
                "the loss stayed up for many steps; one bad batch spikes once", Weight.STRONG
            )
            f.ruled_out.append(
                RuledOut(
                    "one bad batch",
                    f"the smoothed loss stayed above 2x its start from {at(f)}"
                    + (f" to step {came_back}" if came_back is not None else " to the end"),
                )
            )
        else:
            data.seen(f"the loss was back by step {came_back}", Weight.STRONG, step=came_back)
        noise_note(f, facts)
        f.ruled_out.append(
            RuledOut(
                "overfitting",
                "overfitting lowers the training loss; here the training loss itself rose",
            )
        )
        f.fixes += [
            lr_fix(
                0.1, "lower the learning rate by 10x: the loss should fall from the first steps"
            ),
            warmup_fix(facts, "add a learning-rate warm-up"),
            Fix(
                Horizon.LONG_TERM,
                "choose the learning rate with a range test: the largest rate whose loss still "
                "falls over the first steps",
            ),
        ]
        f.monitoring.append("the loss against its start level over the first steps (alert at 2x)")
        clipping(f, lr, facts)
        decay = weight_decay(f, facts, lr)
        return [lr, init, data] + ([decay] if decay else [])


class _Event(NamedTuple):
    """A rise above the start level: the level, and where it began, peaked and came back
    (indices into the run's finite losses), and the run's noise outside it."""

    start: float
    onset: int
    peak: int
    back: int | None
    noise: float | None


def _event(
    steps: list[int], values: list[float], first: int, median: bool = False
) -> _Event | None:
    """The rise above the start level (the loss at ``first``, or with ``median`` the median
    of the losses up to it), or None when there is none, or when it came back within
    ``SUSTAIN`` steps (a spike)."""
    start = statistics.median(values[: first + 1]) if median else values[first]
    if start <= 0:
        return None
    # the rise is looked for after the step that sets the start level, smoothed over steps
    # from it on: what came before it was higher by definition
    smooth = [
        statistics.median(values[max(min(first, i), i - SMOOTH + 1) : i + 1])
        for i in range(len(values))
    ]
    onset = None
    for i in range(first + 1, len(values)):
        if values[i] >= FLOOR * start:
            onset = i
            break
        if len(smooth) - i >= SUSTAIN and all(x > RISE * start for x in smooth[i : i + SUSTAIN]):
            onset = i
            break
    if onset is None:
        return None
    peak_i = max(range(onset, len(values)), key=lambda i: values[i])
    # the smoothed loss lags the loss by SMOOTH - 1 steps: it cannot be back before that
    after = max(peak_i, onset + SMOOTH - 1)
    back_i = next((i for i in range(after, len(smooth)) if smooth[i] < BACK * start), None)
    if back_i is not None and steps[back_i] - steps[onset] < SUSTAIN:
        return None  # up and back within a few steps: a spike (loss_spike), not a blow-up
    end_i = back_i if back_i is not None else len(values)
    noise = excursions(values[:onset] + values[end_i:])  # the run's noise outside the event
    return _Event(start, onset, peak_i, back_i, noise)
