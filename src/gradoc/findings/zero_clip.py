"""zero_clip: the program's gradient clipping threshold is 0, so every gradient is zeroed.

Needs: the program's own clipping (``clip_grad_norm_`` / ``clip_grad_value_``, recorded by
``collect/attach/clipping.py``): its threshold and the norm it measured, at every step it ran.

``clip_grad_norm_(params, 0.0)`` scales the gradients by ``0 / (norm + 1e-6)``: by zero. A
threshold of 0 read from a config where 0 was meant as "no clipping" (a common convention:
Hugging Face's ``max_grad_norm=0`` skips the call, PyTorch's does not) leaves every update
zero for SGD and Adam alike (their moments never leave 0), and nothing trains. The mechanism is
seen directly, so a clip at most ``ZERO`` (0) on at least ``SHARE`` (half) of the steps it ran,
at least ``MIN_STEPS`` (3), while the gradients it measured were not 0, is an **error**; the
flat loss and the updates that never moved (``tiny_updates``, ``loss_plateau``) are its
consequences, whatever their severities, and a learning rate "far too low" is ruled out with
the run's own numbers (``tests/mechanisms/clip_zero.py``).
"""

from __future__ import annotations

from ..detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, RuledOut, Weight
from ..detect.history import History
from ..detect.signals import clip_factors, fmt, median
from .advice import clip_site
from .facts import Facts
from .kind import FindingKind

ZERO = 0.0
SHARE = 0.5
MIN_STEPS = 3


class ZeroClip(FindingKind):
    """The program clips its gradients to a norm (or value) of 0: every update is zero."""

    name = "zero_clip"
    setup = True
    link = -1  # a set-up before the first step: the first link of whatever began with it
    harm = (
        "The mechanism itself: a threshold of 0 on at least half of the steps the clip ran, "
        "while the gradients it measured were not 0, leaves every update zero."
    )

    def check(self, h: History) -> list[Finding]:
        limits = dict(zip(h.clip_max.steps, h.clip_max.values))
        ran = [
            (s, v, limits[s]) for s, v in zip(h.clip_norm.steps, h.clip_norm.values) if s in limits
        ]
        zeroed = [(s, v) for s, v, t in ran if t <= ZERO and v > 0]
        if len(zeroed) < MIN_STEPS or len(zeroed) < SHARE * len(ran):
            return []
        first = zeroed[0][0]
        measured = median([v for _, v in zeroed])
        return [
            self.found(
                severity="error",
                step=first,
                summary=(
                    f"gradients clipped to 0: the program's clip threshold was 0 on "
                    f"{len(zeroed)} of the {len(ran)} steps it ran, so every gradient was scaled "
                    f"to zero (their norm before it: {fmt(measured)}, median) and no update moved "
                    "a weight"
                ),
                evidence=[
                    Evidence("the clip threshold", fmt(ZERO), step=first),
                    Evidence(
                        "steps clipped to 0 / steps the clip ran", f"{len(zeroed)} of {len(ran)}"
                    ),
                    Evidence("gradient norm the clip measured (median)", fmt(measured)),
                ],
            )
        ]

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        f.symptom = "the program clips every gradient to zero, so nothing trains"
        zero = Hypothesis(
            Family.LOOP,
            "a gradient clipping threshold of 0 (0 meant as 'no clipping'): "
            "clip_grad_norm_(params, 0) scales every gradient by 0",
            "print the max_norm passed to clip_grad_norm_ (or clip_value to clip_grad_value_)",
            base=0.3,
        )
        zero.seen(f.summary, Weight.DECISIVE, step=f.step)
        if facts.lr is not None and facts.lr > 0:
            f.ruled_out.append(
                RuledOut(
                    "learning rate far too low",
                    f"the learning rate is {fmt(facts.lr)}, but it scales a gradient of 0: "
                    "no learning rate moves the weights",
                )
            )
        factors = [c for _, c in clip_factors(h.clip_norm, h.clip_max)]
        if factors:
            f.evidence.append(
                Evidence("largest factor the clip scaled the gradients by", fmt(max(factors)))
            )
        f.fixes += [
            Fix(
                Horizon.IMMEDIATE,
                "give clip_grad_norm_ a positive max_norm (1.0 is the usual start), or skip the "
                "call where clipping is meant to be off: if max_norm > 0: clip_grad_norm_(...)",
                code=clip_site(h),
            ),
            Fix(
                Horizon.SHORT_TERM,
                "validate the config: reject a clip threshold <= 0 unless it means 'off', and "
                "say so where it is read",
            ),
            Fix(
                Horizon.LONG_TERM,
                "log the gradient norm before and after clipping: a norm of 0 after it is this bug",
            ),
        ]
        f.monitoring.append("gradient norm after clipping (alert when it is 0)")
        return [zero]
