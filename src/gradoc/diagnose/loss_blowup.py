"""loss_blowup: the loss rose far above where it started and stayed up for a while."""

from __future__ import annotations

import math

from ..detect._util import ce_classes, fmt
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
from .advice import (
    at,
    at_chance,
    clip_advice,
    clipping,
    lr_fix,
    lr_too_high,
    noise_note,
    update_signs,
)
from .facts import Facts

KIND = Kind.LOSS_BLOWUP
CAUSED_BY = (
    Kind.ACCUMULATING_GRADIENTS,
    Kind.NONFINITE,
    Kind.EXPLODING_GRADIENTS,
    Kind.LOSS_DIVERGENCE,
)
CONSIDERS_ZERO_INIT = False


def explain(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    d = f.details
    came_back = d.get("came_back_at")
    f.symptom = f"the loss rose {fmt(d['peak_ratio'])}x above where it started, from {at(f)}" + (
        f", and came back by step {came_back}" if came_back is not None else ""
    )
    lr = lr_too_high(
        0.3, "re-run with the learning rate divided by 10: the first steps should lower the loss"
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
            WEAK,
            step=f.step,
        )
    first = facts.first_update_ratio
    if first is not None and first > facts.large_ratio:
        lr.seen(
            f"the first update moved a weight matrix by {fmt(first)} of its norm ("
            f"{fmt(facts.large_ratio)} is large for {facts.optimizer or 'this optimizer'})",
            STRONG,
            value=first,
        )
    elif first is not None and first < facts.large_ratio / 10:
        lr.against(
            f"the first update moved the weights by at most {fmt(first)} of their norm", MODERATE
        )
    else:
        update_signs(lr, facts, f)
    for r in f.related:
        if r["kind"] == Kind.DEAD_UNITS:
            lr.seen(f"units died after the blow-up ({r['summary']})", MODERATE, step=r.get("step"))
        elif r["kind"] == Kind.LOSS_PLATEAU:
            lr.seen("the loss never got below where the blow-up left it", MODERATE)
        elif r["kind"] == Kind.EXPLODING_GRADIENTS:
            lr.seen(f"the gradients grew with it ({r['summary']})", WEAK, step=r.get("step"))
    k = at_chance(d.get("end_loss"), h)
    if k is not None:
        f.symptom += f"; it ended at ln({k}), chance level: the model predicts nothing"
        lr.seen(f"the loss ended at chance level, ln({k}) = {fmt(math.log(k))}", MODERATE)
    start_k = ce_classes(h)
    if start_k and d.get("start_loss", 0) > 1.5 * math.log(start_k):
        init.seen(
            f"the loss started at {fmt(d['start_loss'])}, above chance (ln({start_k}) = "
            f"{fmt(math.log(start_k))})",
            MODERATE,
            step=0,
        )
    elif start_k:
        init.against(
            f"the loss started at {fmt(d['start_loss'])}, near chance (ln({start_k}))",
            MODERATE,
            step=0,
        )
    sustained = came_back is None or came_back - (f.step or 0) >= 3
    if sustained:
        data.against("the loss stayed up for many steps; one bad batch spikes once", STRONG)
        f.ruled_out.append(
            RuledOut(
                "one bad batch",
                f"the smoothed loss stayed above 2x its start from {at(f)}"
                + (f" to step {came_back}" if came_back is not None else " to the end"),
            )
        )
    else:
        data.seen(f"the loss was back by step {came_back}", STRONG, step=came_back)
    noise_note(f, facts)
    f.ruled_out.append(
        RuledOut(
            "overfitting",
            "overfitting lowers the training loss; here the training loss itself rose",
        )
    )
    f.fixes += [
        lr_fix(0.1, "lower the learning rate by 10x: the loss should fall from the first steps"),
        Fix(Horizon.SHORT_TERM, "add a learning-rate warm-up and " + clip_advice(facts)),
        Fix(
            Horizon.LONG_TERM,
            "choose the learning rate with a range test: the largest rate whose loss still "
            "falls over the first steps",
        ),
    ]
    f.monitoring.append("the loss against its start level over the first steps (alert at 2x)")
    clipping(f, lr, facts)
    return [lr, init, data]
