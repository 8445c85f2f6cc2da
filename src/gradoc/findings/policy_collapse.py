"""policy_collapse: a policy went certain of one action in a handful of updates and stayed so:
it no longer explores, and its gradient is gone.

Needs: an objective judged a policy (``detect.training``: a policy-gradient surrogate, or an
actor-critic's one loss) and its entropy, read from the loss's autograd graph at
``backward()`` (``collect.graph.policy``: a categorical policy's entropy as a share of its
maximum ln(k), the first 20 updates and one in 10 after).

Rule: the entropy fell from at least ``HIGH`` (0.5) of its maximum to at most ``COLLAPSED``
(0.001) within ``FAST`` (10) updates, and the run ended collapsed (the median of its last
quarter of samples at most ``COLLAPSED``; at least ``MIN_SAMPLES`` (10) samples). Or, at any
speed, it ended collapsed while the program's own return (``detect.measures``: an episode
return or reward it logged, or a gymnasium environment's) did not improve: a certain policy
that earns no more than at the start learnt nothing (our A2C rewarded for certainty, its
entropy bonus's sign flipped: 0.99 to 0.0002 of its maximum over 40 updates, its return about
-0.1 throughout, where the healthy run's rose to 0.9). A policy
that learns its task also grows certain, but over many updates: our healthy PPO
(``tests/shapes/ppo_healthy.py``) went from 0.53 to below 0.001 in about 100 updates and
ended at 5e-5; pytorch/examples' actor-critic on CartPole dipped to 0.0075 and recovered.
One that is certain a few updates after it was uniform learnt nothing: the actor-critic at
100x its learning rate went from 0.996 to 3e-6 (its probabilities clamped at 1 - eps) in one
update, the reward stayed at its minimum, and it never moved again. The harm is mechanical:
the gradient of ``log p(a)`` with respect to the logits is ``onehot(a) - p``, zero at
certainty (and exactly zero through ``Categorical(probs=...)``'s clamp), so the policy
cannot learn its way back; only the entropy read from the graph says so, since the loss of
a certain policy sits still rather than blowing up.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, RuledOut, Weight
from ..detect.history import History
from ..detect.signals import fmt
from ..detect.training import Objective, Training
from .facts import Facts
from .kind import Details, FindingKind

HIGH = 0.5
COLLAPSED = 1e-3
FAST = 10
MIN_SAMPLES = 10


@dataclass(slots=True)
class Collapse(Details):
    """The entropy before and after the fall (shares of its maximum), and the steps."""

    before: float
    before_step: int
    after: float
    late: float
    actions: int | None
    returned: str = ""
    """What the program's return did, where it logged one and it did not improve (the
    collapse then needs no speed to be harm)."""


def _slow(o: Objective) -> tuple[int, int]:
    """(step of the last sample at ``HIGH`` or more before the first at ``COLLAPSED`` or less,
    that step): a collapse at any speed (the first sample where none was high)."""
    steps, values = o.entropy.steps, o.entropy.values
    low = next((i for i, v in enumerate(values) if v <= COLLAPSED), len(values) - 1)
    high = max((i for i in range(low) if values[i] >= HIGH), default=0)
    return steps[high], steps[low]


def _fall(o: Objective) -> tuple[int, int] | None:
    """(step of the last sample at ``HIGH`` or more, step of the first at ``COLLAPSED`` or
    less within ``FAST`` updates of it): the first such fall; None if none."""
    steps, values = o.entropy.steps, o.entropy.values
    high: int | None = None
    for step, v in zip(steps, values):
        if v >= HIGH:
            high = step
        elif v <= COLLAPSED and high is not None and step - high <= FAST:
            return high, step
    return None


class PolicyCollapse(FindingKind):
    """A policy went certain of one action within a few updates and stayed so: it no longer
    explores, and its gradient is gone."""

    name = "policy_collapse"
    harm = (
        "The mechanism itself: a policy certain of one action within 10 updates of being "
        "uncertain, and still so at the end; its gradient is gone."
    )
    caused_by = ("large_updates",)
    link = 25
    example_details = Collapse(before=0.996, before_step=0, after=2.9e-6, late=2.9e-6, actions=2)

    def check(self, h: History) -> list[Finding]:
        found = []
        for o in h.objectives:
            if o.training is not Training.REINFORCEMENT or len(o.entropy) < MIN_SAMPLES:
                continue
            fall = _fall(o)
            late = statistics.median(o.entropy.values[-max(5, len(o.entropy) // 4) :])
            returned = h.return_trend()
            stalled = returned is not None and returned.verdict != "improved"
            if late > COLLAPSED or (fall is None and not stalled):
                continue
            fall = fall or _slow(o)
            steps, values = o.entropy.steps, o.entropy.values
            before, after = values[steps.index(fall[0])], values[steps.index(fall[1])]
            actions = (h.meta.loss_read or {}).get("policy", {}).get("actions")
            said = returned.said() if returned is not None and stalled else ""
            details = Collapse(
                before, fall[0], after, late, actions if isinstance(actions, int) else None, said
            )
            span = fall[1] - fall[0]
            found.append(
                self.found(
                    severity="warning",
                    step=fall[1],
                    objective=o.name if len(h.objectives) > 1 else None,
                    summary=(
                        f"the policy went certain of one action in {span} "
                        f"update{'s' if span != 1 else ''}: its entropy fell from "
                        f"{fmt(before)} to {fmt(after)} of its maximum (step {fall[0]} -> "
                        f"{fall[1]}) and ended at {fmt(late)}: it explores no more, and its "
                        "gradient is gone" + (f"; {said}" if said else "")
                    ),
                    evidence=[
                        Evidence(
                            "policy entropy, share of its maximum ln(k)",
                            f"{fmt(before)} at step {fall[0]} -> {fmt(after)} at step {fall[1]}",
                            step=fall[1],
                        ),
                        Evidence("median entropy over the last quarter of the run", fmt(late)),
                    ]
                    + ([Evidence("the program's own measure", said)] if said else []),
                    details=details,
                )
            )
        return found

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        d = Collapse.of(f.details)
        k = f"{d.actions} actions" if d.actions else "its actions"
        f.symptom = (
            f"the policy is certain of one action in every state it meets (entropy {fmt(d.late)} "
            f"of ln(k) over {k}) since step {f.step}, a few updates after it was uncertain"
        )
        span = (f.step or 0) - d.before_step
        rate = Hypothesis(
            Family.LEARNING_RATE,
            "learning rate too high for the policy: a few updates pushed its logits so far "
            "apart that the softmax saturated",
            "re-run with the learning rate divided by 10 and watch the policy's entropy fall "
            "over tens of updates, not one",
            base=0.3,
        )
        rate.seen(
            f"certain {span} update{'s' if span != 1 else ''} after its entropy was "
            f"{fmt(d.before)} of its maximum",
            Weight.STRONG if span <= 2 else Weight.MODERATE,
            step=f.step,
        )
        explore = Hypothesis(
            Family.LOOP,
            "nothing keeps the policy exploring: no entropy bonus, and advantages that reward "
            "one action push it to certainty",
            "add an entropy bonus to the loss (loss - 0.01 * dist.entropy().mean())",
            base=0.15,
        )
        if d.returned:
            explore.seen(
                f"certain over {span} updates, not one, while {d.returned}: it stopped "
                "exploring before it learnt (an entropy bonus too small, or of the wrong sign)",
                Weight.STRONG if span > 2 else Weight.MODERATE,
            )
        if span <= 2:
            explore.against(
                "an entropy bonus slows a fall over tens of updates; this one took "
                f"{span} update{'s' if span != 1 else ''}",
                Weight.WEAK,
            )
        converged = (
            f"a policy that learnt its task earns more; {d.returned}"
            if d.returned
            else f"a policy that learns grows certain over many updates (our healthy PPO: about "
            f"100 from 0.5 to 0.001 of its maximum entropy); this one took {span}"
        )
        f.ruled_out.append(RuledOut("the policy converged: it learnt the task", converged))
        f.ruled_out.append(
            RuledOut(
                "the loss stopped moving, so training is done",
                "a certain policy's log-probabilities are 0 and so is their gradient: the loss "
                "sits still because the policy can no longer change",
            )
        )
        f.fixes += [
            Fix(Horizon.IMMEDIATE, "lower the learning rate (10x) and restart from scratch"),
            Fix(
                Horizon.SHORT_TERM,
                "add an entropy bonus (0.01 x the policy's mean entropy, subtracted from the "
                "loss); clip the gradient norm",
            ),
            Fix(
                Horizon.LONG_TERM,
                "bound each update's change of the policy: PPO's clipped ratio or a KL target "
                "that stops an update's epochs early",
            ),
        ]
        f.monitoring.append(
            "the policy's entropy per update, as a share of ln(actions) (alert below 0.01 "
            "early in training)"
        )
        return [rate, explore]
