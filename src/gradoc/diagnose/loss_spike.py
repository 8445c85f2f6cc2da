"""loss_spike: the loss jumped and came back. One spike that returns at once is first of
all the batch it was computed on; spikes that repeat are the optimizer's."""

from __future__ import annotations

from ..detect._util import fmt
from ..detect.finding import (
    MODERATE,
    STRONG,
    WEAK,
    Family,
    Finding,
    Fix,
    Horizon,
    Hypothesis,
    Kind,
    RuledOut,
)
from ..detect.history import History
from .advice import at, clip_fix, noise_note, update_signs
from .facts import Facts

KIND = Kind.LOSS_SPIKE
CAUSED_BY = (Kind.ACCUMULATING_GRADIENTS, Kind.NONFINITE, Kind.LOSS_BLOWUP)
CONSIDERS_ZERO_INIT = False
REPEATS = 3
"""Spikes in a run from which they are the optimizer's pattern, not a batch's accident."""


def explain(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = f"the loss jumped at {at(f)} and came back"
    d = f.details
    count, back = d.get("spikes", 1), d.get("back_after")
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
        batch.seen("a single spike in the whole run", MODERATE)
        lr.against("a learning-rate instability repeats; this happened once", MODERATE)
    elif count >= REPEATS:
        lr.seen(f"{count} spikes in the run", MODERATE)
        batch.against(f"{count} spikes: more than one bad batch would explain", WEAK)
    if back is not None and back <= 2:
        batch.seen(
            f"the loss was back at its level {back} step{'s' if back > 1 else ''} later: the "
            "model was not damaged, the batch was different",
            STRONG,
            step=f.step,
        )
    elif back is not None:
        lr.seen(f"the loss took {back} steps to come back: the weights were moved", WEAK)
    update_signs(lr, facts, f)
    noise_note(f, facts)
    f.ruled_out.append(
        RuledOut("loss divergence", "the loss came back to its earlier level within 50 steps")
    )
    if (ratio := d.get("ratio")) is not None and facts.loss_noise is not None:
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
    f.monitoring += ["rolling z-score of the loss (alert above 6)", "global gradient norm per step"]
    return [batch, lr]
