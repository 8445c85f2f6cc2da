"""nonfinite: the loss or a gradient became NaN or Inf.

Needs: per-step loss, per-parameter gradient non-finite counts, and the run's
``nonfinite_loss`` event: a loss the program computed and read (``if not
torch.isfinite(loss): break``, ``print(loss.item())``) or its model returned, that never
became a step's loss (it did not reach ``backward()``, or the step never ended).
Rule: any NaN/Inf is an error; there is no threshold to calibrate (SageMaker Debugger
and AUTOTRAINER both treat a single non-finite value as a failure). The finding points
at the first step where either the loss or a gradient was non-finite. Among the
parameters with non-finite gradients at that step it names the one registered last:
backward runs from the output towards the input, so the last-registered parameter with
a non-finite gradient is the nearest to where backward first met the bad value (locating
the operation itself is the job of ``locate``).

Growth before: when, before that step, the loss rose ``GROWTH`` (100)x above the least of
its first 3 values or the global gradient norm ``GROWTH``x above its early median (first
10 steps), the finding's ``details["grew_before"]`` holds the ratios: the op that turned
the values non-finite only overflowed what was already blowing up (SGD at lr 50 on a
transformer: loss 1.45, then 4e8, then NaN in a LayerNorm; benchmarks/accuracy.py,
calibration split, transformer:lr_sgd), so it is a consequence, not a root cause.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._util.json_types import JsonObject
from .._util.text import module_label
from ..detect.finding import (
    Evidence,
    Family,
    Finding,
    Fix,
    Horizon,
    Hypothesis,
    Origin,
    RuledOut,
    Weight,
)
from ..detect.history import History
from ..detect.signals import fmt
from ..locate.mechanism import NO_IDIOM, low_precision
from ..store import EventKind, RunMeta
from .advice import LR_TOO_HIGH, at, clip_fix, code_at, loss_before, lr_fix, lr_ruled_out, related
from .facts import Facts
from .kind import Details, FindingKind

GROWTH = 100.0


@dataclass(slots=True, kw_only=True)
class NonfiniteFacts(Details):
    """What a non-finite finding's explanation reads besides its origin (only what is
    known is written)."""

    printed: str | None = None
    """The NaN/Inf the program printed before it ended, in nothing gradoc watched."""
    grew_before: dict[str, float] | None = None
    """How much the loss and the gradient norm grew in the steps before (x their start)."""
    to_the_end: int | None = None
    """The step from which the loss was NaN/Inf at every step to the last: how the run
    ended (told on its own, whatever story it joins)."""
    steps_after: int | None = None
    """With ``to_the_end``: the steps from it to the last, every one of them non-finite."""

    def to_json(self) -> JsonObject:
        return {k: v for k, v in Details.to_json(self).items() if v is not None}


def _grew_before(h: History, step: int) -> dict[str, float]:
    grew = {}
    loss = [(s, v) for s, v in zip(h.loss.steps, h.loss.values) if math.isfinite(v)]
    start = [v for _, v in loss[:3]]
    before = [v for s, v in loss if s < step]
    if start and before and min(start) > 0 and max(before) >= GROWTH * min(start):
        grew["loss"] = max(before) / min(start)
    norms = [(s, v) for s, v in zip(h.grad_norm.steps, h.grad_norm.values) if math.isfinite(v)]
    early = sorted(v for _, v in norms[:10])
    later = [v for s, v in norms if s < step]
    if early and later and early[len(early) // 2] > 0:
        ratio = max(later) / early[len(early) // 2]
        if ratio >= GROWTH:
            grew["grad_norm"] = ratio
    return grew


def _fmt(value: float | None) -> str:
    return "missing" if value is None else repr(value).lower()


def _unbacked(h: History) -> tuple[int, str, str] | None:
    """The run's first non-finite loss that was never a step's loss (see the module
    docstring): (step, value, how the program had it); None without one."""
    event = next(
        (e for e in h.events if e.kind == EventKind.NONFINITE_LOSS and "read_by" in e.data), None
    )
    if event is None or event.step is None:
        return None
    how = str(event.data["read_by"])
    what = how if event.data.get("backpropagated") else f"{how}, never backpropagated"
    return event.step, str(event.data.get("value", "nan")), what


def printed_at_the_end(meta: RunMeta) -> int | None:
    """The step of a NaN/Inf the program printed within its last step (``loss nan`` from a
    detached loss, a metric gradoc does not watch) before it ended; None otherwise (a
    ``best = inf`` printed long before the end is not one)."""
    last, steps = meta.printed_nonfinite_last, meta.steps
    at = last.get("step") if last else None
    if not isinstance(at, int) or not isinstance(steps, int) or steps == 0:
        return None
    return at if at >= steps - 1 else None


def _printed(h: History) -> list[Finding]:
    """A NaN/Inf the program printed just before it ended, in nothing gradoc watched: not
    healthy, and said plainly (``gradoc run`` re-runs the script to find it when it may)."""
    at = printed_at_the_end(h.meta)
    if at is None:
        return []
    text = str((h.meta.printed_nonfinite_last or {}).get("text", ""))[:160]
    return [
        Finding(
            kind="nonfinite",
            severity="warning",
            step=at,
            layer=None,
            summary=(
                f"the program printed a non-finite value at step {at} and then ended "
                f"({text[:80]!r}), in something gradoc does not watch (a detached loss, a "
                "metric): the loss and gradients it watched were finite"
            ),
            evidence=[Evidence("printed", text, step=at)],
            details=NonfiniteFacts(printed=text),
        )
    ]


def _steady(
    f: Finding, h: History, facts: Facts, op: Hypothesis, grow: Hypothesis, rule_out: bool
) -> None:
    """The gradient norm before the failure: steady contradicts growth (and rules out
    exploding gradients, unless an update wrote the NaN: an update is not a gradient)."""
    before = [
        v
        for s, v in zip(h.grad_norm.steps, h.grad_norm.values)
        if f.step is not None and s < f.step and math.isfinite(v)
    ]
    if not before:
        grow.unseen("the gradient norm before the failure (no step before it)")
        return
    last = max(before[-5:])
    if last < 10 * (facts.grad_median or math.inf):
        claim = (
            f"the gradient norm was steady before (last 5 steps <= {fmt(last)}, median "
            f"{fmt(facts.grad_median or 0)})"
        )
        op.seen(claim, Weight.WEAK)
        grow.against(claim, Weight.MODERATE)
        if rule_out:
            f.ruled_out.append(
                RuledOut(
                    "exploding gradients",
                    f"the gradient norm stayed within 10x its median "
                    f"({fmt(facts.grad_median or 0)}) until the failure",
                )
            )
    else:
        grow.seen(
            f"the gradient norm reached {fmt(last)} in the last steps before", Weight.MODERATE
        )


def _eps_hypothesis(f: Finding, origin: Origin) -> Hypothesis | None:
    """An update that wrote NaN/Inf because its eps is 0 in the weights' dtype (located
    with ``locate.replay.eps_evidence``): its division by the state is x/0 where that
    state is exactly 0, whatever the learning rate."""
    evidence = origin.evidence
    eps = next((e for e in evidence if "eps" in e.extra), None)
    if eps is None:
        return None
    said = eps.extra
    dtype = str(said.get("dtype"))
    low = dtype in ("float16", "bfloat16")
    zeros = [e for e in evidence if "state" in e.extra]  # counts of exact zeros of a state
    h = Hypothesis(
        Family.PRECISION if low and said["eps"] else Family.NUMERICS,
        f"the optimizer's eps ({fmt(said['eps'])}) is 0 in {dtype}: its update divides by "
        "sqrt(state) + eps, and where that state is exactly 0 the update is x/0"
        + (
            " (with Adam's defaults, (1 - beta2) * grad**2 is 0 in float16 for |grad| < 8e-3)"
            if dtype == "float16"
            else ""
        ),
        "print optimizer.param_groups[0]['eps'] and the dtype of the weights; count the exact "
        "zeros of the optimizer's state (exp_avg_sq for Adam)",
    )
    h.seen(
        f"the update of step {origin.step} wrote non-finite weights from finite "
        f"gradients, and eps {fmt(said['eps'])} is {fmt(eps.value)} as {dtype}",
        Weight.DECISIVE,
    )
    for e in zeros:
        if e.value:
            h.seen(f"{e.signal}: {e.value} of {e.extra.get('of')}", Weight.MODERATE)
    f.ruled_out.append(
        RuledOut(
            LR_TOO_HIGH,
            "the update divided by an exact 0: a smaller learning rate scales x/0, it does "
            "not make it finite",
        )
    )
    return h


def _fixes(
    f: Finding, facts: Facts, extra: list[Hypothesis], grew: dict[str, float], origin: Origin | None
) -> None:
    phase = origin.phase if origin is not None else None
    if extra:
        f.fixes += _eps_fixes(extra[0])
    elif phase == "optimizer" or grew:
        f.fixes.append(lr_fix(0.1, "lower the learning rate by 10x"))
    f.fixes.append(
        Fix(
            Horizon.IMMEDIATE,
            f"restart from a checkpoint saved before {at(f)} and skip steps whose loss is not "
            "finite (gradoc.watch(..., guard=True) or gradoc run --guard does it, and rolls "
            "back when they repeat)",
            apply={"skip_nonfinite": True},
        )
    )
    if phase == "optimizer":  # no operation of the user's to guard
        f.fixes += [] if extra else [clip_fix(facts, Horizon.SHORT_TERM)]
        f.fixes.append(
            Fix(
                Horizon.LONG_TERM,
                "test one training step in the dtype you train in: assert "
                "torch.isfinite(p).all() for every weight after optimizer.step()",
            )
        )
    else:
        f.fixes += [
            _guard(origin),
            Fix(
                Horizon.LONG_TERM,
                f"add a numerics test for {(origin and origin.module) or 'the module'} on "
                "edge-case "
                "inputs (sequence lengths 1 and 2, empty, all-zero, very large) that asserts "
                "finite outputs and gradients",
            ),
        ]
    f.monitoring.append(
        "non-finite loss and gradients on every step (gradoc records them by default)"
    )
    evidence = origin.evidence if origin is not None else []
    for name in dict.fromkeys(e.extra["argument"] for e in evidence if "argument" in e.extra):
        f.monitoring.append(
            f"the range of `{name}` in every batch (min / max), with an alert on values "
            "the model was never tested on"
        )


def _mechanism(f: Finding, op: Hypothesis, origin: Origin) -> None:
    """Why the born value was bad (``origin.mechanism``): the cause says it in the run's
    numbers, and a learning rate is ruled out where the NaN came before any update could
    matter."""
    m = origin.mechanism
    if m is None:
        return
    op.cause += f"; {m.said}"
    if low_precision(m):
        op.family = Family.PRECISION
    if m.kind in ("underflow", "saturation", "zero", "domain") and (f.step or 0) <= 1:
        f.ruled_out.append(
            RuledOut(
                LR_TOO_HIGH,
                f"the NaN is {_ARTICLE[m.kind]} of {origin.op} at {at(f)}, before any update "
                "could matter",
            )
        )


_ARTICLE = {
    "underflow": "an underflow",
    "saturation": "a saturation",
    "zero": "a zero where none can be",
    "domain": "an argument out of its domain",
}


def _guard(origin: Origin | None) -> Fix:
    """The short-term fix at the op: its mechanism's stable idiom, else a guard said with what
    it changes."""
    code = code_at(origin) if origin is not None else None
    m = origin.mechanism if origin is not None else None
    if m is not None and m.name not in NO_IDIOM:
        return Fix(Horizon.SHORT_TERM, f"write it in its stable form: {m.idiom}", code=code)
    if m is not None:
        return Fix(Horizon.SHORT_TERM, m.idiom, code=code)
    return Fix(
        Horizon.SHORT_TERM,
        "guard the operation that produced it: add an epsilon to divisors, log and sqrt "
        "arguments (x.clamp_min(1e-12)), use log_softmax instead of log(softmax)",
        code=code,
    )


def _eps_fixes(h: Hypothesis) -> list[Fix]:
    if h.family == Family.PRECISION:
        return [
            Fix(
                Horizon.IMMEDIATE,
                "keep the weights and the optimizer in float32 and train in mixed precision: "
                "torch.autocast(device_type, dtype=torch.float16) with torch.amp.GradScaler, "
                "instead of model.half()",
            ),
            Fix(
                Horizon.SHORT_TERM,
                "if the weights must stay in float16, give the optimizer an eps float16 holds "
                "(eps=1e-4), or use bfloat16",
            ),
        ]
    return [Fix(Horizon.IMMEDIATE, "give the optimizer an eps above 0 (1e-8)")]


def born_in_user_code(f: Finding) -> bool:
    """A NaN/Inf whose birth was located in the user's forward, backward or data, and not
    an overflow of values that were already blowing up (``details["grew_before"]``)."""
    origin = f.origin
    if f.kind != "nonfinite" or origin is None or NonfiniteFacts.of(f.details).grew_before:
        return False
    return origin.phase == "input" or (origin.phase in ("forward", "backward") and bool(origin.op))


class Nonfinite(FindingKind):
    """The loss, the gradients or the weights became NaN/Inf.

    Where it was born decides most of it (``origin``, from ``locate``): an operation of the
    user's forward or backward pass, the inputs, or an update. Values that were already
    growing before they overflowed (``details["grew_before"]``) point at a learning rate."""

    name = "nonfinite"
    harm = "Any NaN or Inf in the loss or a gradient."
    caused_by = (
        "accumulating_gradients",
        "exploding_gradients",
        "loss_blowup",
        "loss_divergence",
        "large_updates",
    )
    link = 10

    def rank(self, f: Finding) -> int:
        # a NaN/Inf the updates wrote (not born in the user's code) comes after what
        # blew the values up: large updates rank 100
        return self.link if born_in_user_code(f) else 110

    def root(self, f: Finding) -> bool:
        """Born in the user's code: a root cause in itself, and what follows it is its
        consequence."""
        return born_in_user_code(f)

    def can_cause(self, f: Finding) -> bool:
        """A NaN the updates wrote is itself a consequence, not a first link."""
        return born_in_user_code(f)

    def told(self, f: Finding) -> bool:
        """A loss NaN to the end of the run is how the run ended: said on its own."""
        return NonfiniteFacts.of(f.details).to_the_end is not None

    def check(self, h: History) -> list[Finding]:
        loss = h.loss
        bad_loss = loss.first_nonfinite()
        counts = h.grad_nonfinite
        bad_grad = next((s for s, v in zip(counts.steps, counts.values) if v), None)
        # a located origin is itself the evidence (a script may stop before backward)
        origins = [
            Origin.from_json(e.data["origin"])
            for e in h.events
            if e.kind == EventKind.NONFINITE_ORIGIN
        ]
        first_origin = min((o.step for o in origins if o.step is not None), default=None)
        unbacked = _unbacked(h)
        bad_unbacked = unbacked[0] if unbacked is not None else None
        if bad_loss is None and bad_grad is None and first_origin is None and bad_unbacked is None:
            return _printed(h)
        step = min(s for s in (bad_loss, bad_grad, first_origin, bad_unbacked) if s is not None)
        evidence: list[Evidence] = []
        layer = None
        parts = []
        if unbacked is not None and (bad_loss is None or unbacked[0] < bad_loss):
            at, shown, what = unbacked
            evidence.append(Evidence("loss, never a step's loss", shown, step=at))
            parts.append(f"loss became {shown} at step {at} ({what})")
        elif bad_loss is not None:
            at, shown = bad_loss, _fmt(loss.at(bad_loss))
            evidence.append(Evidence("loss", shown, step=at))
            parts.append(f"loss became {shown} at step {at}")
        if unbacked is not None or bad_loss is not None:
            before = [v for s, v in zip(loss.steps, loss.values) if s < at and math.isfinite(v)]
            if before:
                evidence.append(Evidence("last finite loss", before[-1]))
        if bad_grad is not None:
            with_grads = [
                p for p in h.params if h.param(p.name, "grad_nonfinite").at(bad_grad) is not None
            ]
            bad = [(p, h.param(p.name, "grad_nonfinite").at(bad_grad) or 0) for p in with_grads]
            bad = [(p, c) for p, c in bad if c]
            total = int(sum(c for _, c in bad))
            nearest = bad[-1][0] if bad else None  # params are in registration order
            layer = nearest.module if nearest else None
            evidence.append(Evidence("non-finite gradient values", total, step=bad_grad))
            evidence.append(
                Evidence(
                    "parameters with non-finite gradients",
                    len(bad),
                    extra={"of": len(with_grads), "names": [p.name for p, _ in bad][-10:]},
                )
            )
            where = f" (nearest the loss: {nearest.name})" if nearest else ""
            parts.append(
                f"{len(bad)} of {len(with_grads)} parameters had non-finite gradients "
                f"at step {bad_grad}{where}"
            )
        # a later origin caught with tracing armed is more precise than the first replay's
        origin = next((o for o in reversed(origins) if o.file), origins[0] if origins else None)
        if origin is not None:
            # the located birth is the story: its module is the layer, its step the start
            layer = origin.module if origin.phase != "input" else layer
            step = min(step, origin.step) if origin.step is not None else step
            where = f" in {module_label(origin.module)}"
            line = f" at {origin.file}:{origin.line}" if origin.file else ""
            if origin.op:
                parts.insert(0, f"born in the {origin.phase} pass: {origin.op}{where}{line}")
            elif origin.phase == "input":
                parts.insert(0, "born in the input data")
            elif origin.late:
                parts.insert(
                    0,
                    f"born in the {origin.phase} pass of step {origin.step} (its gradients were "
                    "read a step late; where in it, a re-run tells)",
                )
            elif origin.module is None:
                parts.insert(0, f"born outside the model ({origin.phase} pass)")
        skipped = h.meta.skipped_updates
        if skipped:
            evidence.append(Evidence("non-finite updates not applied", skipped))
        grew = _grew_before(h, step)
        for what, ratio in grew.items():
            evidence.append(Evidence(f"{what.replace('_', ' ')} growth before", fmt(ratio)))
        end = loss.nonfinite_to_the_end()
        after = sum(1 for s in loss.steps if end is not None and s >= end)
        if end is not None:
            last = loss.steps[-1]
            final = _fmt(loss.values[-1])
            parts.append(
                f"the loss stayed non-finite from step {end} to the last step, {last} ({after} "
                f"of the {len(loss)} steps whose loss was read; {final} at the last)"
            )
            evidence.append(Evidence("loss non-finite to the end from", end, step=end))
            evidence.append(Evidence("steps non-finite from then to the last", after))
        return [
            self.found(
                severity="error",
                step=step,
                layer=layer,
                summary="; ".join(parts),
                evidence=evidence,
                origin=origin,
                details=NonfiniteFacts(
                    grew_before=grew or None,
                    to_the_end=end,
                    steps_after=after if end is not None else None,
                ),
            )
        ]

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        f.symptom = (
            f"the program printed a NaN/Inf at {at(f)} and ended"
            if NonfiniteFacts.of(f.details).printed
            else f"the loss or the gradients became NaN/Inf at {at(f)}"
        )
        origin = f.origin
        phase = origin.phase if origin is not None else None
        op = Hypothesis(
            Family.NUMERICS,
            "a numerically unsafe operation in the forward pass (log of 0, division by 0, sqrt "
            "of a "
            "negative, exp overflow, a norm without epsilon)",
            "re-run the failing step under torch.autograd.detect_anomaly() or check each module's "
            "output with torch.isfinite to find the first non-finite one",
            base=0.3,
        )
        data = Hypothesis(
            Family.DATA,
            "non-finite or extreme values in the input batch",
            f"assert torch.isfinite(batch).all() for the batch of {at(f)}",
            base=0.2,
        )
        grow = Hypothesis(
            Family.GRADIENTS,
            "gradients that grew until they overflowed",
            "plot the global gradient norm before the failure",
            base=0.1,
        )
        _steady(f, h, facts, op, grow, rule_out=phase != "optimizer")
        if (r := lr_ruled_out(facts, f)) is not None:
            f.ruled_out.append(r)
        loss_before(f, h)
        lengths = related(f, "length_anomaly")
        if lengths is not None and lengths.step == f.step:
            op.seen(f"the failing batch had unusual lengths: {lengths.summary}", Weight.MODERATE)
            f.evidence.append(Evidence("length anomaly at the same step", True))
        facts_of_op = [f"{e.signal}: {e.value}" for e in origin.evidence] if origin else []
        where = f" in {module_label(origin.module if origin else None)}"
        if origin is not None and origin.file:
            where += f" at {origin.file}:{origin.line}"
        extra: list[Hypothesis] = []  # what the origin adds (an optimizer's eps of 0)
        if origin is not None and phase in ("forward", "backward") and origin.op:
            op.cause = f"{origin.op} ({phase} pass){where}"
            if origin.code:
                op.cause += f": `{origin.code}`"
            op.seen(
                f"the first non-finite value was made by {origin.op} ({phase} pass)",
                Weight.DECISIVE,
            )
            _mechanism(f, op, origin)
            for claim in facts_of_op:
                op.seen(claim, Weight.WEAK)
            op.check = (
                "test that code on edge-case inputs (empty, length 1, all-zero, very large) "
                "and guard it: an epsilon in divisors, log and sqrt arguments, clamp exp inputs"
            )
        elif phase == "input":
            data.seen("the model's inputs were already non-finite", Weight.DECISIVE)
            for claim in facts_of_op:
                data.seen(claim, Weight.WEAK)
            op.against("the model's inputs were already non-finite", Weight.STRONG)
        elif origin is not None and phase == "optimizer":
            grow.cause = (
                "an optimizer update that wrote non-finite weights (learning rate too high)"
            )
            grow.family = Family.LEARNING_RATE
            eps = _eps_hypothesis(f, origin)
            finite = (
                f"the forward and backward of step {origin.step} were finite; the update "
                "after them wrote the first non-finite values"
            )
            if eps is not None:
                extra.append(eps)
                grow.seen(finite, Weight.STRONG)
                grow.against(eps.signs[0].claim, Weight.DECISIVE)
            else:
                grow.seen(finite, Weight.DECISIVE)
                for claim in facts_of_op:
                    grow.seen(claim, Weight.WEAK)
            op.against(finite, Weight.STRONG)
            data.against(finite, Weight.STRONG)
        else:
            op.unseen("where the first NaN/Inf was made (not located)")
        grew = NonfiniteFacts.of(f.details).grew_before or {}
        if grew and phase != "input":
            grow.cause = (
                "values that blew up before they overflowed: a learning rate too high for "
                "this model (or an initialisation that grows)"
            )
            grow.family = Family.LEARNING_RATE
            for k, v in grew.items():
                grow.seen(f"{k.replace('_', ' ')} rose {fmt(v)}x before", Weight.STRONG)
            op.against(
                "the values were already blowing up before this op overflowed", Weight.STRONG
            )
        if f.step == 0 and phase != "optimizer":
            data.seen(
                "non-finite from the very first step: nothing was learnt yet", Weight.WEAK, step=0
            )
            grow.against(
                "there was no training before step 0 to grow anything", Weight.MODERATE, step=0
            )
        _fixes(f, facts, extra, grew, origin)
        return [op, data, grow, *extra]
