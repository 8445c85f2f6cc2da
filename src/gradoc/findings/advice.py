"""What several diagnoses say alike: fixes, the program's own clipping, what the loss did
before a failure, the update/weight ratio against this optimizer's expectation."""

from __future__ import annotations

import math
import statistics

from .._util.json_types import JsonObject
from ..detect.finding import (
    CodeLine,
    Evidence,
    Family,
    Finding,
    Fix,
    Horizon,
    Hypothesis,
    Origin,
    Related,
    RuledOut,
    Weight,
)
from ..detect.history import History
from ..detect.signals import ce_classes, fmt
from .facts import Facts

LR_TOO_HIGH = "learning rate too high"
"""The cause, and the wrong diagnosis ruled out, that several kinds name."""


def lr_too_high(
    base: float, check: str = "re-run with the learning rate divided by 10"
) -> Hypothesis:
    """The hypothesis "learning rate too high", as every kind that considers it words it."""
    return Hypothesis(Family.LEARNING_RATE, LR_TOO_HIGH, check, base=base)


DECAY_STRONG = 5e-3
"""A weight decay that takes this share of every weight per step (``lr * wd``, over ``1 -
momentum`` for SGD) halves an unused weight in ~140 steps: strong enough to pin the weights
near 0 where the gradient cannot hold them (SGD at lr 0.1, momentum 0.9, wd 2: 2 per step,
the loss at ln 5 for good; ``tests/mechanisms/decay_pinned.py``). Usual settings take 1e-5
(AdamW lr 1e-3, wd 0.01) to 5e-4 (SGD lr 0.1, momentum 0.9, wd 5e-5)."""
DECAY_ORDINARY = 5e-4
DECOUPLED = ("AdamW", "Lion")
"""Optimizers whose weight decay is decoupled from the gradient (``w -= lr * wd * w``)."""
USUAL_DECAY = {True: 0.1, False: 5e-3}
"""The largest usual weight_decay, decoupled (AdamW: 0.01-0.1) or added to the gradient (SGD,
Adam: 1e-5 to 5e-4, 5e-3 at most): a decay is far too strong at 10x it (a GCN's Adam at 0.5,
timm's AdamW at 5, SGD at 2). Below that, a large ``lr * wd`` is the learning rate's doing
(nanoGPT at lr 0.1 with its usual AdamW decay of 0.1)."""
SHRUNK = 0.5
"""Weights whose median norm ended at most this share of where it began shrank."""


def weight_decay(f: Finding, facts: Facts, lr: Hypothesis) -> Hypothesis | None:
    """Weight decay strong enough to pin the weights, weighed against the learning rate with
    the run's numbers; None where the optimizer has no weight decay."""
    if facts.weight_decay is None:
        return None
    wd, share = facts.weight_decay
    decay = Hypothesis(
        Family.REGULARIZATION,
        f"weight decay far too strong (weight_decay={fmt(wd)}): it pulls every weight to 0 "
        "faster than the gradient can move it",
        "re-run with weight_decay divided by 1000 (1e-4 to 1e-2 is usual): the loss should "
        "leave where it sits",
        base=0.05,
    )
    shrink = facts.weight_shrink
    decoupled = facts.optimizer in DECOUPLED
    usual = USUAL_DECAY[decoupled]
    if share >= DECAY_STRONG and wd < 10 * usual:  # the rate makes it strong, not the decay
        decay.against(
            f"weight_decay={fmt(wd)} is usual for {facts.optimizer or 'this optimizer'} (up to "
            f"{fmt(usual)}); it takes {fmt(share)} of every weight a step because the learning "
            "rate is large",
            Weight.MODERATE,
        )
    elif too_strong(facts):
        decay.seen(
            f"each step takes {fmt(share)} of every weight away (lr x weight_decay"
            + (" / (1 - momentum)" if facts.optimizer == "SGD" else "")
            + f"); usual settings take {fmt(1e-5)} to {fmt(DECAY_ORDINARY)}",
            Weight.STRONG,
        )
        first, rate = facts.first_update_ratio, facts.lr
        if first is not None and rate is not None and rate * wd >= first / 2:
            lr.against(
                f"the first update ({fmt(first)} of a weight's norm) is what the decay alone "
                f"takes in one step (lr x weight_decay = {fmt(rate * wd)})",
                Weight.MODERATE,
            )
        if shrink is not None and shrink <= SHRUNK:
            decay.seen(
                f"the weights shrank to {fmt(shrink)} of their initial norm (median over the "
                "weight matrices)",
                Weight.STRONG,
            )
            lr.against(
                f"the weights shrank to {fmt(shrink)} of their initial norm: a learning rate "
                "too high scatters or grows them; a decay pulls them to 0",
                Weight.MODERATE,
            )
    elif share <= DECAY_ORDINARY:
        decay.against(
            f"each step takes {fmt(share)} of every weight away: an ordinary decay",
            Weight.STRONG,
        )
    if shrink is not None and shrink > 1:
        decay.against(f"the weights grew to {fmt(shrink)}x their initial norm", Weight.STRONG)
    if decay.score > lr.score:
        f.fixes.insert(
            0,
            Fix(
                Horizon.IMMEDIATE,
                f"lower weight_decay from {fmt(wd)} to about {fmt(wd / 1000)} (or use AdamW's "
                "decoupled decay, 0.01-0.1 at its usual learning rates)",
            ),
        )
    return decay


def too_strong(facts: Facts) -> bool:
    """A decay far too strong by its own setting (:func:`decay_too_strong`)."""
    return decay_too_strong(facts.weight_decay, facts.optimizer)


def decay_too_strong(decay: tuple[float, float] | None, optimizer: str | None) -> bool:
    """A decay (its setting, and the share of every weight it takes a step) far too strong by
    its own setting: each step takes ``DECAY_STRONG`` or more of every weight, with a
    weight_decay 10x the largest usual one for ``optimizer``'s kind (a usual decay that takes
    as much is the learning rate's doing)."""
    if decay is None:
        return False
    wd, share = decay
    return share >= DECAY_STRONG and wd >= 10 * USUAL_DECAY[optimizer in DECOUPLED]


def pinned(facts: Facts) -> bool:
    """Weights a far too strong decay pulled to 0 (shrunk to ``SHRUNK`` or less): a loss that
    then sits at chance, never below where it went, is the decay's doing, and tells
    nothing of the learning rate."""
    shrink = facts.weight_shrink
    return too_strong(facts) and shrink is not None and shrink <= SHRUNK


def at(f: Finding) -> str:
    return f"step {f.step}" if f.step is not None else "the run"


def related(f: Finding, kind: str) -> Related | None:
    return next((r for r in f.related if r.kind == kind), None)


def init_advice(facts: Facts) -> str:
    if facts.relu_like:
        return (
            "He (Kaiming) initialisation for the ReLU-family layers: "
            "nn.init.kaiming_normal_(w, nonlinearity='relu'), biases 0"
        )
    if facts.saturating:
        return (
            "Xavier (Glorot) initialisation for the tanh/sigmoid layers: "
            "nn.init.xavier_uniform_(w, gain=nn.init.calculate_gain('tanh'))"
        )
    return (
        "a variance-preserving initialisation: nn.init.xavier_uniform_(w) (gain 1) where no "
        "activation follows a layer, Kaiming for ReLU-like and Xavier with "
        "calculate_gain for tanh/sigmoid layers"
    )


def clip_advice(facts: Facts) -> str:
    if facts.clip is not None and not clip_off(facts):  # it clips: more of it is not the fix
        threshold, bit, steps = facts.clip
        return (
            f"keep the program's gradient clipping at {fmt(threshold)} (it bit on {bit} of "
            f"{steps} steps): clipping bounds each step, it does not remove the cause"
        )
    off = (
        f"the program's gradient clip is at {fmt(facts.clip[0])}, which never clips: "
        if facts.clip is not None
        else ""
    )
    if not facts.grad_p99:  # no healthy step to learn a scale from
        return (
            f"{off}clip the global gradient norm while the cause is fixed: "
            "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"
        )
    p99 = fmt(facts.grad_p99)
    return (
        f"{off}clip the global gradient norm at {p99}, the p99 of this run's healthy steps: "
        f"torch.nn.utils.clip_grad_norm_(model.parameters(), {p99})"
    )


def clip_off(facts: Facts) -> bool:
    """The program calls a gradient clip with a threshold that never clips (``--clip inf``)."""
    return facts.clip is not None and not math.isfinite(facts.clip[0])


def clip_site(h: History) -> CodeLine | None:
    """The line of the program's clip call, as the run recorded it (``meta.clipping.at``)."""
    return CodeLine.from_json((h.meta.clipping or {}).get("at"))


def clip_to(facts: Facts) -> float | str:
    """The threshold gradoc clips at: the p99 of the run's healthy norms, else ZClip."""
    return float(fmt(facts.grad_p99)) if facts.grad_p99 else "zclip"


def clip_fix(facts: Facts, horizon: Horizon = Horizon.IMMEDIATE) -> Fix:
    """The clipping fix, applicable without a code change (``gradoc run --fix``)."""
    return Fix(horizon, clip_advice(facts), apply={"clip": clip_to(facts)})


def warmup_fix(facts: Facts, warmup: str) -> Fix:
    """A warm-up, and clipping where the program does not clip (or clips at inf): then the
    clip is applicable without a code change, the next fix tried after the learning rate."""
    unclipped = facts.clip is None or clip_off(facts)
    apply: JsonObject | None = {"clip": clip_to(facts)} if unclipped else None
    return Fix(Horizon.SHORT_TERM, f"{warmup} and {clip_advice(facts)}", apply=apply)


def lr_fix(factor: float, action: str, horizon: Horizon = Horizon.IMMEDIATE) -> Fix:
    return Fix(horizon, action, apply={"lr_scale": factor})


def code_at(origin: Origin) -> CodeLine | None:
    """Where a code fix goes, when the origin names a line of the user's code."""
    if not origin.file:
        return None
    return CodeLine(origin.file, origin.line, origin.code)


WARMED = 0.5
"""A first update made at less than this share of the rate the problem came at was made in a
warm-up: its size is no evidence against a rate too high."""


def warming(h: History, step: int | None) -> bool:
    """The first recorded update came while a warm-up was still climbing: the rate at the
    first step was below ``WARMED`` of the highest rate up to ``step`` (the problem's), so
    the first update is no measure of the rate the problem came at."""
    if step is None:
        return False
    rates = [v for s, v in zip(h.lr.steps, h.lr.values) if s <= step and math.isfinite(v)]
    return bool(rates) and rates[0] < WARMED * max(rates)


def update_signs(lr: Hypothesis, facts: Facts, f: Finding) -> None:
    """The update/weight ratio before the problem against what this optimizer does on a
    healthy run (``Facts.large_ratio``): above it supports a learning rate too high, ten
    times below it contradicts one."""
    if facts.max_update_ratio is None:
        lr.unseen(f"update/weight ratios above {fmt(facts.large_ratio)} before {at(f)}")
        return
    peak, limit = facts.max_update_ratio, facts.large_ratio
    opt = facts.optimizer or "the optimizer"
    claim = (
        f"update/weight ratio before {at(f)}: median {fmt(facts.median_update_ratio or 0)}, "
        f"max {fmt(peak)}, against {fmt(limit)} that is large for {opt}"
    )
    if peak > limit:
        lr.seen(claim, Weight.STRONG, value=peak)
    elif peak < limit / 10:
        lr.against(claim, Weight.MODERATE, value=peak)
    else:
        lr.unseen(claim, value=peak)


def first_update_large(facts: Facts) -> str | None:
    """That the first update moved a weight matrix by more than is large for this optimizer
    (``Facts.large_ratio``), in a sign's words; None when it did not, or was not read."""
    first = facts.first_update_ratio
    if first is None or first <= facts.large_ratio:
        return None
    return (
        f"the first update moved a weight matrix by {fmt(first)} of its norm ("
        f"{fmt(facts.large_ratio)} is large for {facts.optimizer or 'this optimizer'})"
    )


def lr_ruled_out(facts: Facts, f: Finding) -> RuledOut | None:
    """A learning rate too high, ruled out by updates far below this optimizer's large."""
    peak = facts.max_update_ratio
    if peak is not None and peak < facts.large_ratio / 10:
        return RuledOut(
            LR_TOO_HIGH,
            f"the update/weight ratio stayed at or below {fmt(peak)} before {at(f)}; a "
            f"learning rate that is too high for {facts.optimizer or 'this optimizer'} shows "
            f"ratios of {fmt(facts.large_ratio)} and more",
        )
    return None


def clipping(f: Finding, lr: Hypothesis, facts: Facts) -> None:
    """The program's own clipping, as a signal: a clip that bites on most steps means the
    raw gradients were above its threshold most of the time (the norms gradoc shows are
    before it)."""
    if facts.clip is None:
        return
    threshold, bit, steps = facts.clip
    f.evidence.append(
        Evidence(f"steps the program's gradient clip at {fmt(threshold)} bit", f"{bit} of {steps}")
    )
    if bit > steps / 2:
        lr.seen(
            f"the program's clip at {fmt(threshold)} bit on {bit} of {steps} steps: the "
            "gradients were above it most of the time",
            Weight.WEAK,
        )


def loss_before(f: Finding, h: History) -> None:
    """How the loss moved before a failure: a signal, and what it rules out."""
    before = [
        v
        for s, v in zip(h.loss.steps, h.loss.values)
        if f.step is not None and s < f.step and math.isfinite(v)
    ]
    if len(before) < 10:
        return
    k = max(5, len(before) // 5)
    early, late = statistics.median(before[:k]), statistics.median(before[-k:])
    trend = "falling" if late < 0.97 * early else "rising" if late > 1.03 * early else "flat"
    f.evidence.append(
        Evidence(
            f"loss before {at(f)} (median of the first / last {k} steps)",
            f"{fmt(early)} -> {fmt(late)}, {trend}",
        )
    )
    if trend != "rising":
        f.ruled_out.append(
            RuledOut(
                "overfitting or data drift",
                f"the training loss was {trend} before {at(f)} ({fmt(early)} -> {fmt(late)}) "
                "and turned non-finite in one step; overfitting and drift move the loss "
                "gradually, and neither makes it NaN",
            )
        )


def at_chance(value: object, h: History) -> int | None:
    """k when ``value`` is the chance level ln(k) of a k-class cross-entropy (within 3%):
    the model predicts the uniform distribution, it has learnt nothing."""
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    known = ce_classes(h)
    candidates = [known] if known else ([] if h.meta.loss_fn else range(2, 1001))
    for k in candidates:
        if abs(value - math.log(k)) < 0.03 * math.log(k):
            return k
    return None


def grad_jump(h: History, before: int | None, facts: Facts) -> tuple[int, float] | None:
    """The step and factor of the largest gradient norm before ``before``, against the
    run's early median, when it is at least 10x (a jump the learning rate makes)."""
    if before is None or not facts.grad_median:
        return None
    seen = [
        (s, v)
        for s, v in zip(h.grad_norm.steps, h.grad_norm.values)
        if s <= before and math.isfinite(v)
    ]
    if not seen:
        return None
    s, v = max(seen, key=lambda sv: sv[1])
    return (s, v / facts.grad_median) if v >= 10 * facts.grad_median else None


def loss_jump(h: History, before: int | None) -> tuple[int, float] | None:
    """The step and factor of the highest loss up to ``before`` against the first loss,
    when it is at least 2x."""
    pairs = [
        (s, v)
        for s, v in zip(h.loss.steps, h.loss.values)
        if before is not None and s <= before and math.isfinite(v)
    ]
    if len(pairs) < 2 or pairs[0][1] <= 0:
        return None
    s, v = max(pairs, key=lambda sv: sv[1])
    return (s, v / pairs[0][1]) if v >= 2 * pairs[0][1] else None


def zero_init(facts: Facts) -> Hypothesis | None:
    """Weights that start at exactly zero: every unit computes the same output and gets
    the same gradient, so nothing differentiates (what a stuck kind considers first)."""
    names = facts.zero_weights or []
    if not names:
        return None
    h = Hypothesis(
        Family.INITIALIZATION,
        "weights initialised to zero: every unit computes the same output and gets the same "
        "gradient, so the layers never differentiate",
        "print p.abs().max() for the weight matrices before training",
        base=0.1,
    )
    h.seen(
        f"{len(names)} weight matrices had norm 0 at their first record "
        f"({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})",
        Weight.DECISIVE,
        step=0,
    )
    return h


def noise_note(f: Finding, facts: Facts) -> None:
    if facts.loss_noise is not None:
        f.evidence.append(
            Evidence(
                "the loss's ordinary excursion (95th percentile of loss / its recent median)",
                fmt(facts.loss_noise),
            )
        )


__all__ = [
    "LR_TOO_HIGH",
    "at",
    "at_chance",
    "clip_advice",
    "clip_fix",
    "clip_off",
    "clipping",
    "code_at",
    "grad_jump",
    "init_advice",
    "loss_before",
    "loss_jump",
    "lr_fix",
    "lr_ruled_out",
    "lr_too_high",
    "noise_note",
    "pinned",
    "related",
    "update_signs",
    "warmup_fix",
    "zero_init",
]
