"""nonfinite: the loss, the gradients or the weights became NaN/Inf.

Where it was born decides most of it (``origin``, from ``locate``): an operation of the
user's forward or backward pass, the inputs, or an update. Values that were already
growing before they overflowed (``details["grew_before"]``) point at a learning rate.
"""

from __future__ import annotations

import math
from typing import Any

from .._util.text import module_label
from ..detect._util import fmt
from ..detect.finding import (
    DECISIVE,
    MODERATE,
    STRONG,
    WEAK,
    Evidence,
    Family,
    Finding,
    Fix,
    Horizon,
    Hypothesis,
    Kind,
    RuledOut,
)
from ..detect.history import History
from .advice import LR_TOO_HIGH, at, clip_fix, code_at, loss_before, lr_fix, lr_ruled_out, related
from .facts import Facts

KIND = Kind.NONFINITE
CAUSED_BY = (
    Kind.ACCUMULATING_GRADIENTS,
    Kind.EXPLODING_GRADIENTS,
    Kind.LOSS_BLOWUP,
    Kind.LOSS_DIVERGENCE,
    Kind.LARGE_UPDATES,
)
CONSIDERS_ZERO_INIT = False


def explain(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = (
        f"the program printed a NaN/Inf at {at(f)} and ended"
        if f.details.get("printed")
        else f"the loss or the gradients became NaN/Inf at {at(f)}"
    )
    origin = f.origin or {}
    phase = origin.get("phase")
    op = Hypothesis(
        Family.NUMERICS,
        "a numerically unsafe operation in the forward pass (log of 0, division by 0, sqrt of a "
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
    lengths = related(f, Kind.LENGTH_ANOMALY)
    if lengths is not None and lengths.get("step") == f.step:
        op.seen(f"the failing batch had unusual lengths: {lengths['summary']}", MODERATE)
        f.evidence.append(Evidence("length anomaly at the same step", True))
    facts_of_op = [f"{e['signal']}: {e['value']}" for e in origin.get("evidence", [])]
    where = f" in {module_label(origin.get('module'))}"
    if origin.get("file"):
        where += f" at {origin['file']}:{origin['line']}"
    extra: list[Hypothesis] = []  # what the origin adds (an optimizer's eps of 0)
    if phase in ("forward", "backward") and origin.get("op"):
        op.cause = f"{origin['op']} ({phase} pass){where}"
        if origin.get("code"):
            op.cause += f": `{origin['code']}`"
        op.seen(f"the first non-finite value was made by {origin['op']} ({phase} pass)", DECISIVE)
        for claim in facts_of_op:
            op.seen(claim, WEAK)
        op.check = (
            "test that code on edge-case inputs (empty, length 1, all-zero, very large) "
            "and guard it: an epsilon in divisors, log and sqrt arguments, clamp exp inputs"
        )
    elif phase == "input":
        data.seen("the model's inputs were already non-finite", DECISIVE)
        for claim in facts_of_op:
            data.seen(claim, WEAK)
        op.against("the model's inputs were already non-finite", STRONG)
    elif phase == "optimizer":
        grow.cause = "an optimizer update that wrote non-finite weights (learning rate too high)"
        grow.family = Family.LEARNING_RATE
        eps = _eps_hypothesis(f, origin)
        finite = (
            f"the forward and backward of step {origin.get('step')} were finite; the update "
            "after them wrote the first non-finite values"
        )
        if eps is not None:
            extra.append(eps)
            grow.seen(finite, STRONG)
            grow.against(eps.signs[0].claim, DECISIVE)
        else:
            grow.seen(finite, DECISIVE)
            for claim in facts_of_op:
                grow.seen(claim, WEAK)
        op.against(finite, STRONG)
        data.against(finite, STRONG)
    else:
        op.unseen("where the first NaN/Inf was made (not located)")
    grew = f.details.get("grew_before") or {}
    if grew and phase != "input":
        grow.cause = (
            "values that blew up before they overflowed: a learning rate too high for "
            "this model (or an initialisation that grows)"
        )
        grow.family = Family.LEARNING_RATE
        for k, v in grew.items():
            grow.seen(f"{k.replace('_', ' ')} rose {fmt(v)}x before", STRONG)
        op.against("the values were already blowing up before this op overflowed", STRONG)
    if f.step == 0 and phase != "optimizer":
        data.seen("non-finite from the very first step: nothing was learnt yet", WEAK, step=0)
        grow.against("there was no training before step 0 to grow anything", MODERATE, step=0)
    _fixes(f, facts, extra, grew, origin)
    return [op, data, grow, *extra]


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
        op.seen(claim, WEAK)
        grow.against(claim, MODERATE)
        if rule_out:
            f.ruled_out.append(
                RuledOut(
                    "exploding gradients",
                    f"the gradient norm stayed within 10x its median "
                    f"({fmt(facts.grad_median or 0)}) until the failure",
                )
            )
    else:
        grow.seen(f"the gradient norm reached {fmt(last)} in the last steps before", MODERATE)


def _eps_hypothesis(f: Finding, origin: dict[str, Any]) -> Hypothesis | None:
    """An update that wrote NaN/Inf because its eps is 0 in the weights' dtype (located
    with ``locate.replay.eps_evidence``): its division by the state is x/0 where that
    state is exactly 0, whatever the learning rate."""
    evidence = origin.get("evidence", [])
    eps = next((e for e in evidence if "eps" in e), None)
    if eps is None:
        return None
    dtype, low = eps["dtype"], eps["dtype"] in ("float16", "bfloat16")
    zeros = [e for e in evidence if "state" in e]  # counts of exact zeros of a state
    h = Hypothesis(
        Family.PRECISION if low and eps["eps"] else Family.NUMERICS,
        f"the optimizer's eps ({fmt(eps['eps'])}) is 0 in {dtype}: its update divides by "
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
        f"the update of step {origin.get('step')} wrote non-finite weights from finite "
        f"gradients, and eps {fmt(eps['eps'])} is {fmt(eps['value'])} as {dtype}",
        DECISIVE,
    )
    for e in zeros:
        if e["value"]:
            h.seen(f"{e['signal']}: {e['value']} of {e['of']}", MODERATE)
    f.ruled_out.append(
        RuledOut(
            LR_TOO_HIGH,
            "the update divided by an exact 0: a smaller learning rate scales x/0, it does "
            "not make it finite",
        )
    )
    return h


def _fixes(
    f: Finding, facts: Facts, extra: list[Hypothesis], grew: dict[str, Any], origin: dict[str, Any]
) -> None:
    phase = origin.get("phase")
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
            Fix(
                Horizon.SHORT_TERM,
                "guard the operation that produced it: add an epsilon to divisors, log and "
                "sqrt arguments (x.clamp_min(1e-12)), use log_softmax instead of log(softmax)",
                code=code_at(origin),
            ),
            Fix(
                Horizon.LONG_TERM,
                f"add a numerics test for {origin.get('module') or 'the module'} on edge-case "
                "inputs (sequence lengths 1 and 2, empty, all-zero, very large) that asserts "
                "finite outputs and gradients",
            ),
        ]
    f.monitoring.append(
        "non-finite loss and gradients on every step (gradoc records them by default)"
    )
    for name in dict.fromkeys(e["argument"] for e in origin.get("evidence", []) if "argument" in e):
        f.monitoring.append(
            f"the range of `{name}` in every batch (min / max), with an alert on values "
            "the model was never tested on"
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
