"""game_stopped: an adversarial game in which the generator gets no gradient any more.

Needs: a run with a generator and a discriminator (``detect.training``), each objective's
loss, and the generator's per-parameter gradient norms.

A game works while the discriminator's verdict depends on what it is shown: that dependence
is the generator's only gradient. It has stopped when, from some step to the end of the run,
for at least ``MIN_STOPPED`` (20) steps and a fifth of the run, the generator's gradient norm
is at most ``GONE`` (1e-6) of its median over the first ``START`` (5) steps on every step
recorded: the discriminator outputs the same thing whatever it is shown, so the fakes never
move again, and its own loss carries no information (it sits still, or flips between two
values as its last bias oscillates). A discriminator whose units all died does exactly that
(``tests/mechanisms/gan_stopped_game.py``: SGD at lr 5 for the discriminator, 1,000x the
generator's rate; its ReLUs die by step 10, its loss sits at 2.0889, the generator's flips
between 0.156 and 1.93, and the generator's gradient is 0 from step 13 to the end). A
generator whose gradient is small but not 0 still plays: our healthy GANs never fall below
1e-3 of their start. The mechanism is seen directly: an **error**.

A stalemate is the same game stopped by saturation rather than by dead units: the
discriminator outputs 0.5 for everything (both losses at ln 2 to the third decimal), and the
generator's gradient is faint, not gone. It is told by both together over the same span (the
rule's 20 steps and a fifth of the run): the generator's gradient at most ``QUIET`` (1e-2) of
its start, and each player's loss within ``FROZEN`` (0.01) from the span's start to the end.
A 1-D GAN whose discriminator trains at 100x its rate (SGD, momentum 0.9,
``real-programs-3/gan_d_lr_x100``) sits there from about step 1,600 on: its losses at
0.6931 to four decimals, its generator's gradient 2e-3 of its start, the fakes frozen far
from the data. A healthy game is never that still: the same GAN at its published rates moves
its losses by 0.75 and more over its last fifth, and its generator's gradient grows.
"""

from __future__ import annotations

import math
import statistics

from ..detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, Weight
from ..detect.history import History
from ..detect.signals import fmt
from ..detect.training import Objective
from .adversarial_imbalance import pairs, players, rates
from .advice import related
from .facts import Facts
from .kind import FindingKind

MIN_STOPPED = 20
GONE = 1e-6
START = 5
QUIET = 1e-2
FROZEN = 0.01


def _quiet_since(norms: list[float], below: float) -> int | None:
    """The index from which every norm is at most ``below`` to the end, where that holds for
    at least ``MIN_STOPPED`` recorded steps and a fifth of them; else None."""
    i = len(norms)
    while i > 0 and norms[i - 1] <= below:
        i -= 1
    return None if len(norms) - i < max(MIN_STOPPED, len(norms) // 5) else i


def _spread(o: Objective, since: int) -> tuple[float, float]:
    """The median of ``o``'s finite loss from ``since`` on, and its spread (max - min)."""
    values = [v for s, v in zip(o.loss.steps, o.loss.values) if s >= since and math.isfinite(v)]
    return (statistics.median(values), max(values) - min(values)) if values else (math.nan, 0.0)


def objective_gradient(h: History, o: Objective) -> tuple[list[int], list[float]]:
    """The objective's gradient norm per recorded step (its optimizers' parameters)."""
    names = [p.name for p in h.params if p.optimizer in o.optimizers]
    by_step: dict[int, float] = {}
    for name in names:
        g = h.param(name, "grad_norm")
        for s, v in zip(g.steps, g.values):
            by_step[s] = by_step.get(s, 0.0) + v * v
    steps = sorted(by_step)
    return steps, [math.sqrt(by_step[s]) for s in steps]


class GameStopped(FindingKind):
    """An adversarial game stopped: the generator gets no gradient through the discriminator,
    whose output no longer depends on its input."""

    name = "game_stopped"
    harm = (
        "The mechanism itself: the generator's gradient gone (at most 1e-6 of its start) on every "
        "step to the end of the run, for at least 20 steps and a fifth of it; or faint (1e-2) "
        "with both players' losses frozen to within 0.01 over that span."
    )
    caused_by = ("eval_mode", "large_updates", "exploding_gradients", "nonfinite")
    link = 25

    def check(self, h: History) -> list[Finding]:
        found = []
        for g, d in pairs(h):
            steps, norms = objective_gradient(h, g)
            early = [v for v in norms[:START] if math.isfinite(v)]
            base = statistics.median(early) if early else 0.0
            if not base > 0 or len(steps) < 2 * START:
                continue
            i = _quiet_since(norms, GONE * base)
            if i is None:  # not gone: a stalemate, both losses frozen and the gradient faint
                i = _quiet_since(norms, QUIET * base)
                if i is None or not all(_spread(o, steps[i])[1] <= FROZEN for o in (g, d)):
                    continue
            onset = steps[i]
            g_level, _ = _spread(g, onset)
            d_level, d_spread = _spread(d, onset)
            span = len(norms) - i
            found.append(
                self.found(
                    severity="error",
                    step=onset,
                    objective=g.name,
                    summary=(
                        f"the game stopped at step {onset}: {g.name} gets no gradient through "
                        f"{d.name} on any of the last {span} steps recorded (its gradient norm "
                        f"{fmt(max(norms[i:]))} against {fmt(base)} at the start): {d.name}'s "
                        "output no longer depends on its input, so the fakes stop moving"
                    ),
                    evidence=[
                        Evidence(f"{g.name}'s gradient norm at the start (median)", fmt(base)),
                        Evidence(f"{g.name}'s largest gradient norm since", fmt(max(norms[i:]))),
                        Evidence(
                            f"{d.name}'s loss since (median, spread)",
                            f"{fmt(d_level)}, {fmt(d_spread)}",
                        ),
                        Evidence(f"{g.name}'s loss since (median)", fmt(g_level)),
                    ],
                )
            )
        return found

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        pair, g_name, d_name = players(h, f)
        f.symptom = f"neither {g_name} nor {d_name} learns any more: the game stopped"
        rate = Hypothesis(
            Family.LEARNING_RATE,
            f"{d_name}'s learning rate far too high: its steps killed or saturated its units, "
            "and it outputs one constant (0.5 for everything at a stalemate)",
            f"re-run with {d_name}'s learning rate equal to {g_name}'s",
            base=0.3,
        )
        cut = Hypothesis(
            Family.LOOP,
            f"{g_name}'s output does not reach {d_name}'s input through the graph (a detach, or "
            f"{d_name} scoring a tensor computed without gradient)",
            f"check that {g_name}'s loss.grad_fn reaches {g_name}'s parameters",
            base=0.1,
        )
        both = rates(h, pair)
        if both is not None:
            g_lr, d_lr = both
            if d_lr >= 10 * g_lr:
                rate.seen(
                    f"{d_name}'s learning rate {fmt(d_lr)} is {fmt(d_lr / g_lr)}x {g_name}'s "
                    f"({fmt(g_lr)})",
                    Weight.STRONG,
                )
            else:
                rate.against(
                    f"{d_name}'s learning rate {fmt(d_lr)}, {g_name}'s {fmt(g_lr)}", Weight.MODERATE
                )
        if f.step is not None and f.step > 0:
            cut.against(
                f"{g_name} got a gradient until the game stopped at step {f.step}", Weight.STRONG
            )
            rate.seen(f"the game ran, then stopped at step {f.step}", Weight.WEAK)
        dead = related(f, "dead_units")
        if dead:
            rate.seen(dead.summary, Weight.STRONG, step=dead.step)
        f.fixes += [
            Fix(
                Horizon.IMMEDIATE,
                f"lower {d_name}'s learning rate to {g_name}'s (the game's two rates within "
                "2-4x of each other)",
            ),
            Fix(
                Horizon.SHORT_TERM,
                f"LeakyReLU in {d_name} (DCGAN's recipe): units that cannot die cannot freeze it",
            ),
            Fix(
                Horizon.LONG_TERM,
                f"spectral normalisation in {d_name}, or a two-time-scale rule (TTUR) chosen "
                "by a sweep",
            ),
        ]
        f.monitoring += [
            f"{d_name}'s output on real and fake samples (mean and std): a std of 0 is a "
            "dead discriminator",
            f"{g_name}'s gradient norm",
        ]
        return [rate, cut]
