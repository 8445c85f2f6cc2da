"""poor_initialization: the initial model is far from where training should start.

Two rules.

1. Chance level (needs the step-0 loss and the loss function the run recorded): a
   cross-entropy over k classes starts at ln(k) when the initial logits are small, as
   they should be; a step-0 loss above ``CHANCE_RATIO`` (1.5x) ln(k), or ``CHANCE_EXCESS``
   (2) nats above it, whichever is lower, means logits far too large (the initialisation's
   scale, or a logit scale): with many classes a ratio loosens (a 5,000-word model whose
   output layer starts at std 0.15 begins at 11.3 against ln 5000 = 8.5, 1.32x, the right
   word 16x less likely than under a uniform guess; ``tests/mechanisms/wide_vocab_init.py``).
   This is the first check of Karpathy's "A Recipe for Training Neural Networks"
   ("verify loss @ init"): a character GPT whose init std is 1.0 instead of 0.02 starts at
   35 against ln 65 = 4.2. Healthy runs of the calibration set start within 1.2x of it.
2. Scale drift (needs per-module output std at the first activation sample):

Rule: take the outputs of the linear and convolution layers in forward order at the
first sample. Initialisation is poor when their std changes monotonically across at
least ``MIN_LAYERS`` (4) of them, by at least ``PER_LAYER`` (2x) a layer on average, and by
at least ``TOTAL`` (100x) overall. SageMaker Debugger flags a variance spread of 10x
across layers; on the calibration runs that flags PyTorch's default init on a 3-layer
MLP (variance 30x lower at the end, harmless) and a transformer (attention outputs vs
embeddings), so the rule asks for a consistent trend instead. A 10-layer ReLU MLP with
N(0, 1) weights grows ~6x a layer; std-0.01 tanh layers shrink ~12x a layer.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from ..detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, RuledOut, Weight
from ..detect.history import History
from ..detect.signals import ce_classes, fmt
from .advice import LR_TOO_HIGH, init_advice
from .facts import Facts
from .kind import Details, FindingKind

CHAIN = ("Linear", "Conv1d", "Conv2d", "Conv3d", "LazyLinear")
MIN_LAYERS = 4
PER_LAYER = 2.0
TOTAL = 100.0


CHANCE_RATIO = 1.5
CHANCE_EXCESS = 2.0
"""Nats above ln(k) that are poor at any k: the right class e^2 = 7.4x less likely than under
the uniform prediction (a ratio alone loosens with k: 13.7 against ln 30,522 = 10.3 is only
1.33x, a BERT built with ``initializer_range=1``)."""


@dataclass(slots=True, kw_only=True)
class ChanceInit(Details):
    """Rule ``chance``: the loss at step 0 against the chance level of its classes."""

    rule: str = "chance"
    start_loss: float
    chance: float
    """ln(classes): the loss of a model that predicts the uniform distribution."""
    classes: int


@dataclass(slots=True, kw_only=True)
class Drift(Details):
    """Rule ``drift``: the activations' scale changes by a factor layer after layer."""

    rule: str = "drift"
    factor_per_layer: float
    grows: bool


def _chance(h: History) -> list[Finding]:
    k = ce_classes(h)
    if k is None or not h.loss.steps or h.loss.steps[0] != 0:
        return []
    start, chance = h.loss.values[0], math.log(k)
    if not (math.isfinite(start) and start > min(CHANCE_RATIO * chance, chance + CHANCE_EXCESS)):
        return []
    head = next((p.module for p in reversed(h.params) if p.shape and p.shape[0] == k), None)
    return [
        Finding(
            kind="poor_initialization",
            severity="warning",
            step=0,
            layer=head,
            summary=(
                f"poor initialisation: the loss at step 0 is {fmt(start)}, {fmt(start / chance)}x "
                f"the chance level of a {k}-class cross-entropy (ln {k} = {fmt(chance)}): the "
                "initial logits are far too large"
            ),
            evidence=[
                Evidence("loss at step 0", fmt(start)),
                Evidence(f"chance level ln({k})", fmt(chance)),
                Evidence("loss at step 0 / chance", fmt(start / chance)),
            ],
            details=ChanceInit(start_loss=start, chance=chance, classes=k),
        )
    ]


def _drift(h: History) -> list[Finding]:
    chain: list[tuple[str, int, float]] = []
    for m in h.modules:
        if m.type not in CHAIN:
            continue
        std = h.act(m.name, "std")
        if std.steps and math.isfinite(std.values[0]) and std.values[0] > 0:
            chain.append((m.name, std.steps[0], std.values[0]))
    if len(chain) < MIN_LAYERS:
        return []
    logs = [math.log10(s) for _, _, s in chain]
    diffs = [b - a for a, b in itertools.pairwise(logs)]
    monotone = all(d > 0 for d in diffs) or all(d < 0 for d in diffs)
    total = abs(logs[-1] - logs[0])
    if not monotone or total < math.log10(TOTAL) or total / len(diffs) < math.log10(PER_LAYER):
        return []
    grows = diffs[0] > 0
    factor = 10 ** (total / len(diffs))
    first, last = chain[0], chain[-1]
    return [
        Finding(
            kind="poor_initialization",
            severity="warning",
            step=first[1],
            layer=last[0],
            summary=(
                f"poor initialisation: activations {'grow' if grows else 'shrink'} ~{fmt(factor)}x "
                f"a layer, std {fmt(first[2])} at {first[0]} to {fmt(last[2])} at {last[0]}"
            ),
            evidence=[
                Evidence(f"output std of {n}", fmt(v), step=s, type="distribution")
                for n, s, v in chain
            ],
            details=Drift(factor_per_layer=factor, grows=grows),
        )
    ]


def _too_confident(f: Finding, d: ChanceInit, facts: Facts) -> list[Hypothesis]:
    head = f.layer or "the output layer"
    f.symptom = (
        f"the model starts out confidently wrong: its first loss is {fmt(d.start_loss)} "
        f"where a fresh {d.classes}-class model gives ~{fmt(d.chance)}"
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
    claim = f"the loss at step 0 is {fmt(d.start_loss / d.chance)}x chance before any update"
    scale.seen(claim, Weight.STRONG, step=0)
    logit.seen(claim, Weight.MODERATE, step=0)
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


class PoorInitialization(FindingKind):
    """Activations change scale layer after layer from the first step,
    or (rule ``chance``) the first loss is far above a fresh model's chance level."""

    name = "poor_initialization"
    harm = (
        "A loss at step 0 far above chance (a model confident and wrong), or outputs whose scale "
        "drifts 100x across the layers at the first sample."
    )
    caused_by = ("eval_mode", "exploding_gradients", "vanishing_gradients")
    link = 120

    def rank(self, f: Finding) -> int:
        # a loss at step 0 far above its chance level: logits too large at initialisation,
        # which is what makes the first gradients explode (nanoGPT with init std 1.0: loss 35
        # against ln 65 = 4.2, gradient norm 2,200 before the program's clip): the first link
        return 0 if ChanceInit.in_(f) else self.link

    def check(self, h: History) -> list[Finding]:
        return _chance(h) + _drift(h)

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        chance = ChanceInit.in_(f)
        if chance is not None:
            return _too_confident(f, chance, facts)
        f.symptom = "activations change scale layer after layer from the first step"
        init = Hypothesis(
            Family.INITIALIZATION,
            "weights initialised at the wrong scale for the activation",
            "compare nn.init.calculate_gain for the activation with the weights' std x "
            "sqrt(fan_in)",
            base=0.3,
        )
        init.seen(f"at step {f.step}: {f.summary}", Weight.STRONG, step=f.step)
        f.fixes += [
            Fix(Horizon.IMMEDIATE, init_advice(facts)),
            Fix(Horizon.LONG_TERM, "add normalisation layers so the scale cannot drift with depth"),
        ]
        f.monitoring.append("output std per layer at step 0 (gradoc records it)")
        return [init]
