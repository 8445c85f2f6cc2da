"""poor_initialization: activations change scale layer after layer from the first step,
or (rule ``chance``) the first loss is far above a fresh model's chance level."""

from __future__ import annotations

from ..detect._util import fmt
from ..detect.finding import (
    MODERATE,
    STRONG,
    Family,
    Finding,
    Fix,
    Horizon,
    Hypothesis,
    Kind,
    RuledOut,
)
from ..detect.history import History
from .advice import LR_TOO_HIGH, init_advice
from .facts import Facts

KIND = Kind.POOR_INITIALIZATION
CAUSED_BY = (Kind.EXPLODING_GRADIENTS, Kind.VANISHING_GRADIENTS)
CONSIDERS_ZERO_INIT = False


def explain(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    if f.details.get("rule") == "chance":
        return _too_confident(f, facts)
    f.symptom = "activations change scale layer after layer from the first step"
    init = Hypothesis(
        Family.INITIALIZATION,
        "weights initialised at the wrong scale for the activation",
        "compare nn.init.calculate_gain for the activation with the weights' std x sqrt(fan_in)",
        base=0.3,
    )
    init.seen(f"at step {f.step}: {f.summary}", STRONG, step=f.step)
    f.fixes += [
        Fix(Horizon.IMMEDIATE, init_advice(facts)),
        Fix(Horizon.LONG_TERM, "add normalisation layers so the scale cannot drift with depth"),
    ]
    f.monitoring.append("output std per layer at step 0 (gradoc records it)")
    return [init]


def _too_confident(f: Finding, facts: Facts) -> list[Hypothesis]:
    d = f.details
    head = f.layer or "the output layer"
    f.symptom = (
        f"the model starts out confidently wrong: its first loss is {fmt(d['start_loss'])} "
        f"where a fresh {d['classes']}-class model gives ~{fmt(d['chance'])}"
    )
    scale = Hypothesis(
        Family.INITIALIZATION,
        "weights initialised too large (the std of the embeddings and linear layers), so "
        "the initial logits are large",
        f"print the std of {head}'s output at step 0: near 0 gives a loss of ln(k)",
        base=0.3,
    )
    logit = Hypothesis(
        Family.ARCHITECTURE,
        "a logit scale or temperature that multiplies the outputs",
        "look for a multiplication of the logits before the loss",
        base=0.1,
    )
    claim = f"the loss at step 0 is {fmt(d['start_loss'] / d['chance'])}x chance before any update"
    scale.seen(claim, STRONG, step=0)
    logit.seen(claim, MODERATE, step=0)
    f.ruled_out.append(
        RuledOut(
            LR_TOO_HIGH,
            "the loss is too high at step 0, before the learning rate acted",
        )
    )
    f.fixes += [
        Fix(
            Horizon.IMMEDIATE,
            "initialise the weights small: normal(0, 0.02) for embeddings and linear layers "
            f"as GPT-2 does, and zero (or scale down) {head}",
        ),
        Fix(
            Horizon.LONG_TERM,
            "assert in a test that the step-0 loss is within ~10% of ln(classes)",
        ),
    ]
    f.monitoring.append("the loss at step 0 against ln(number of classes)")
    return [scale, logit]
