"""loss_plateau: the loss does not go down: the model is not learning."""

from __future__ import annotations

import math

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
from .advice import at_chance, lr_fix
from .facts import Facts

KIND = Kind.LOSS_PLATEAU
CAUSED_BY = (
    Kind.ACCUMULATING_GRADIENTS,
    Kind.NONFINITE,
    Kind.LOSS_BLOWUP,
    Kind.DEAD_UNITS,
    Kind.VANISHING_GRADIENTS,
    Kind.SATURATED_UNITS,
    Kind.TINY_UPDATES,
    Kind.LOSS_DIVERGENCE,
    Kind.FROZEN_PARAMETERS,
)
CONSIDERS_ZERO_INIT = True
BLOCKING = (Kind.DEAD_UNITS, Kind.VANISHING_GRADIENTS, Kind.SATURATED_UNITS, Kind.TINY_UPDATES)


def explain(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
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
            STRONG,
        )
        low.against("the loss rose in the first steps: the updates were too big", STRONG)
    first = facts.first_update_ratio
    if first is not None and first > facts.large_ratio:
        high.seen(
            f"the first update moved a weight matrix by {fmt(first)} of its norm ("
            f"{fmt(facts.large_ratio)} is large for {facts.optimizer or 'this optimizer'})",
            MODERATE,
        )
    k = at_chance(f.details.get("late_loss"), h)
    if k is not None:  # learnt nothing: every cause of a plateau predicts it, so it weighs little
        data.seen(f"the loss sits at {fmt(math.log(k))} = ln({k}): chance for {k} classes", WEAK)
    if facts.median_update_ratio is not None:
        claim = f"median update/weight ratio {fmt(facts.median_update_ratio)} (healthy ~1e-3)"
        if facts.median_update_ratio < 1e-5:
            low.seen(claim, STRONG)
        elif facts.median_update_ratio > 1e-4:
            low.against(claim, MODERATE)
    causes = [r for r in f.related if r["kind"] in BLOCKING]
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
            f"the model has ungated recurrent layers ({', '.join(ungated)})", MODERATE
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
            blocked.seen(str(r["summary"]), STRONG, step=r.get("step"))
    elif not ungated:  # the layer ratio does not see vanishing through time
        blocked.against("no dead, saturated or vanishing layer was found", MODERATE)
        f.ruled_out.append(
            RuledOut(
                "dead ReLUs or vanishing gradients",
                "no layer has a majority of dead units and the first/last gradient ratio "
                "stayed above 1e-3",
            )
        )
    if not (causes or facts.early_peak_loss or ungated):
        data.seen(
            "nothing inside the model blocked learning (no dead, saturated or vanishing layer)",
            WEAK,
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
    return [data, low, blocked, high] + ([through_time] if ungated else [])
