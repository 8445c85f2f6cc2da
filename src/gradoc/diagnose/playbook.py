"""What a senior engineer knows about each kind of problem, applied to this run's numbers."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .._text import module_label
from ..detect import vanishing
from ..detect._util import ce_classes, fmt
from ..detect.finding import Finding
from ..detect.history import History
from .facts import Facts

# the kinds of root cause a hypothesis names (``Finding.root_cause_family``)
FAMILIES: dict[str, str] = {
    "learning_rate": "the learning rate or its schedule",
    "initialization": "the scale or sign of the initial weights and biases",
    "numerics": "a numerically unsafe operation in the user's code",
    "data": "the inputs or labels: non-finite, extreme, corrupted or unlearnable",
    "architecture": "the model's structure: saturating activations, depth without "
    "normalisation, an ungated recurrence, a logit scale",
    "precision": "values outside the range of a low-precision dtype",
    "masking": "padding that reaches the outputs or the loss",
    "batching": "how batches are formed",
    "gradients": "the gradients themselves, with no upstream cause identified",
}


@dataclass(slots=True)
class Hypothesis:
    family: str
    """What kind of root cause this is (``FAMILIES``): what the corpus scores and tools
    group by; the cause's wording can change, its family does not."""
    cause: str
    prior: float
    check: str
    support: list[str] = field(default_factory=list)
    against: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"unknown root-cause family {self.family!r}")

    @property
    def score(self) -> float:
        return self.prior + 0.3 * len(self.support) - 0.4 * len(self.against)

    def to_json(self) -> dict[str, object]:
        likelihood = "high" if self.score >= 0.8 else "medium" if self.score >= 0.4 else "low"
        return {
            "cause": self.cause,
            "family": self.family,
            "likelihood": likelihood,
            "support": self.support,
            "against": self.against,
            "check": self.check,
        }


def _related(f: Finding, kind: str) -> dict[str, object] | None:
    return next((r for r in f.related if r["kind"] == kind), None)


def _at(f: Finding) -> str:
    return f"step {f.step}" if f.step is not None else "the run"


def _update_note(facts: Facts) -> str | None:
    if facts.max_update_ratio is None:
        return None
    return (
        f"update/weight ratio before the problem: median {fmt(facts.median_update_ratio or 0)}, "
        f"max {fmt(facts.max_update_ratio)} (healthy ~1e-3)"
    )


def _lr_ruled_out(facts: Facts, f: Finding) -> dict[str, str] | None:
    if facts.max_update_ratio is not None and facts.max_update_ratio < 1e-2:
        return {
            "cause": "learning rate too high",
            "why": f"the update/weight ratio stayed at or below {fmt(facts.max_update_ratio)} "
            f"before {_at(f)}; a learning rate that is too high shows ratios of 1e-2 and more",
        }
    return None


def _init_advice(facts: Facts) -> str:
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


def _clip_fix(facts: Facts, horizon: str = "immediate") -> dict[str, object]:
    """The clipping fix, applicable without a code change (``gradoc run --fix``)."""
    at = float(fmt(facts.grad_p99)) if facts.grad_p99 else "zclip"
    return {"horizon": horizon, "action": _clip_advice(facts), "apply": {"clip": at}}


def _code_at(origin: dict[str, object]) -> dict[str, object]:
    """Where a code fix goes, when the origin names a line of the user's code."""
    if not origin.get("file"):
        return {}
    return {"code": {k: origin.get(k) for k in ("file", "line", "code")}}


def _lr_fix(factor: float, action: str, horizon: str = "immediate") -> dict[str, object]:
    return {"horizon": horizon, "action": action, "apply": {"lr_scale": factor}}


def _clip_advice(facts: Facts) -> str:
    if facts.clip is not None:  # the program clips already: more of it is not the fix
        threshold, bit, steps = facts.clip
        return (
            f"keep the program's gradient clipping at {fmt(threshold)} (it bit on {bit} of "
            f"{steps} steps): clipping bounds each step, it does not remove the cause"
        )
    if not facts.grad_p99:  # no healthy step to learn a scale from
        return (
            "clip the global gradient norm while the cause is fixed: "
            "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"
        )
    at = fmt(facts.grad_p99)
    return (
        f"clip the global gradient norm at {at}, the p99 of this run's healthy steps: "
        f"torch.nn.utils.clip_grad_norm_(model.parameters(), {at})"
    )


def _clipping(f: Finding, lr: Hypothesis, facts: Facts) -> None:
    """The program's own clipping, as a signal: a clip that bites on most steps means the
    raw gradients were above its threshold most of the time (the norms gradoc shows are
    before it)."""
    if facts.clip is None:
        return
    threshold, bit, steps = facts.clip
    f.evidence.append(
        {
            "signal": f"steps the program's gradient clip at {fmt(threshold)} bit",
            "value": f"{bit} of {steps}",
        }
    )
    if bit > steps / 2:
        lr.support.append(
            f"the program's clip at {fmt(threshold)} bit on {bit} of {steps} steps: the "
            "gradients were above it most of the time"
        )


def _loss_before(f: Finding, h: History) -> None:
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
        {
            "signal": f"loss before {_at(f)} (median of the first / last {k} steps)",
            "value": f"{fmt(early)} -> {fmt(late)}, {trend}",
        }
    )
    if trend != "rising":
        f.ruled_out.append(
            {
                "cause": "overfitting or data drift",
                "why": f"the training loss was {trend} before {_at(f)} ({fmt(early)} -> "
                f"{fmt(late)}) and turned non-finite in one step; overfitting and drift move "
                "the loss gradually, and neither makes it NaN",
            }
        )


def _at_chance(value: object, h: History) -> int | None:
    """k when ``value`` is the chance level ln(k) of a k-class cross-entropy (within 3%):
    the model predicts the uniform distribution, it has learnt nothing."""
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    known = ce_classes(h)
    candidates = [known] if known else ([] if h.meta.get("loss_fn") else range(2, 1001))
    for k in candidates:
        if abs(value - math.log(k)) < 0.03 * math.log(k):
            return k
    return None


# -- one explanation per kind -------------------------------------------------------------------
def _nonfinite(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = (
        f"the program printed a NaN/Inf at {_at(f)} and ended"
        if f.details.get("printed")
        else f"the loss or the gradients became NaN/Inf at {_at(f)}"
    )
    grads_before = [
        v
        for s, v in zip(h.grad_norm.steps, h.grad_norm.values)
        if f.step is not None and s < f.step and math.isfinite(v)
    ]
    steady = bool(grads_before) and max(grads_before[-5:]) < 10 * (facts.grad_median or math.inf)
    op = Hypothesis(
        "numerics",
        "a numerically unsafe operation in the forward pass (log of 0, division by 0, sqrt of a "
        "negative, exp overflow, a norm without epsilon)",
        0.5,
        "re-run the failing step under torch.autograd.detect_anomaly() or check each module's "
        "output with torch.isfinite to find the first non-finite one",
    )
    data = Hypothesis(
        "data",
        "non-finite or extreme values in the input batch",
        0.3,
        f"assert torch.isfinite(batch).all() for the batch of {_at(f)}",
    )
    grow = Hypothesis(
        "gradients",
        "gradients that grew until they overflowed",
        0.2,
        "plot the global gradient norm before the failure",
    )
    if steady:
        op.support.append(
            f"the gradient norm was steady before (last 5 steps ≤ "
            f"{fmt(max(grads_before[-5:]))}, median {fmt(facts.grad_median or 0)})"
        )
        grow.against.append("the gradient norm did not grow before the failure")
        f.ruled_out.append(
            {
                "cause": "exploding gradients",
                "why": f"the gradient norm stayed within 10x its median "
                f"({fmt(facts.grad_median or 0)}) until the failure",
            }
        )
    if (r := _lr_ruled_out(facts, f)) is not None:
        f.ruled_out.append(r)
    _loss_before(f, h)
    lengths = _related(f, "length_anomaly")
    if lengths is not None and lengths.get("step") == f.step:
        op.support.append(f"the failing batch had unusual lengths: {lengths['summary']}")
        f.evidence.append({"signal": "length anomaly at the same step", "value": True})
    origin = f.origin or {}
    hypotheses: list[Hypothesis] = []  # what the origin adds (an optimizer's eps of 0)
    facts_of_op = [f"{e['signal']}: {e['value']}" for e in origin.get("evidence", [])]
    where = f" in {module_label(origin.get('module'))}"
    if origin.get("file"):
        where += f" at {origin['file']}:{origin['line']}"
    if origin.get("phase") in ("forward", "backward") and origin.get("op"):
        op.cause = f"{origin['op']} ({origin['phase']} pass){where}"
        if origin.get("code"):
            op.cause += f": `{origin['code']}`"
        op.prior = 0.9
        op.support += facts_of_op
        op.check = (
            "test that code on edge-case inputs (empty, length 1, all-zero, very large) "
            "and guard it: an epsilon in divisors, log and sqrt arguments, clamp exp inputs"
        )
    elif origin.get("phase") == "input":
        data.prior = 0.9
        data.support += facts_of_op
        op.against.append("the model's inputs were already non-finite")
    elif origin.get("phase") == "optimizer":
        grow.cause = "an optimizer update that wrote non-finite weights (learning rate too high)"
        grow.family = "learning_rate"
        grow.prior = 0.9
        f.ruled_out = [r for r in f.ruled_out if r["cause"] != "exploding gradients"]
        eps = _eps_hypothesis(f, origin)
        if eps is not None:
            hypotheses.append(eps)
            grow.against.append(eps.support[0])
        else:
            grow.support += facts_of_op
        finite = (
            f"the forward and backward of step {origin.get('step')} were finite; the update "
            "after them wrote the first non-finite values"
        )
        op.against.append(finite)
        data.against.append(finite)
    grew = f.details.get("grew_before") or {}
    if grew and origin.get("phase") != "input":
        grow.cause = (
            "values that blew up before they overflowed: a learning rate too high for "
            "this model (or an initialisation that grows)"
        )
        grow.family = "learning_rate"
        grow.prior = 0.95
        grow.support += [f"{k.replace('_', ' ')} rose {fmt(v)}x before" for k, v in grew.items()]
        op.against.append("the values were already blowing up before this op overflowed")
    if f.step == 0 and origin.get("phase") != "optimizer":
        data.support.append("non-finite from the very first step: nothing was learnt yet")
        grow.against.append("there was no training before step 0 to grow anything")
    if hypotheses:
        f.fixes += _eps_fixes(hypotheses[0])
    elif (origin and origin.get("phase") == "optimizer") or grew:
        f.fixes.append(_lr_fix(0.1, "lower the learning rate by 10x"))
    f.fixes += [
        {
            "horizon": "immediate",
            "action": f"restart from a checkpoint saved before {_at(f)} and skip "
            "steps whose loss is not finite (gradoc.watch(..., guard=True) or "
            "gradoc run --guard does it, and rolls back when they repeat)",
            "apply": {"skip_nonfinite": True},
        },
    ]
    if origin.get("phase") == "optimizer":  # no operation of the user's to guard
        f.fixes += [] if hypotheses else [_clip_fix(facts, "short-term")]
        f.fixes.append(
            {
                "horizon": "long-term",
                "action": "test one training step in the dtype you train in: assert "
                "torch.isfinite(p).all() for every weight after optimizer.step()",
            }
        )
    else:
        f.fixes += [
            {
                "horizon": "short-term",
                "action": "guard the operation that produced it: add an epsilon to "
                "divisors, log and sqrt arguments (x.clamp_min(1e-12)), use log_softmax "
                "instead of log(softmax)",
                **_code_at(origin),
            },
            {
                "horizon": "long-term",
                "action": f"add a numerics test for {origin.get('module') or 'the module'} "
                "on edge-case inputs (sequence lengths 1 and 2, empty, all-zero, very "
                "large) that asserts finite outputs and gradients",
            },
        ]
    f.monitoring += ["non-finite loss and gradients on every step (gradoc records them by default)"]
    for name in dict.fromkeys(e["argument"] for e in origin.get("evidence", []) if "argument" in e):
        f.monitoring.append(
            f"the range of `{name}` in every batch (min / max), with an alert on values "
            "the model was never tested on"
        )
    return [op, data, grow, *hypotheses]


def _eps_hypothesis(f: Finding, origin: dict[str, Any]) -> Hypothesis | None:
    """An update that wrote NaN/Inf because its eps is 0 in the weights' dtype (located
    with ``locate.replay.eps_evidence``): its division by the state is x/0 where that
    state is exactly 0, whatever the learning rate."""
    evidence = origin.get("evidence", [])
    eps = next((e for e in evidence if "eps" in e), None)
    if eps is None:
        return None
    dtype, low = eps["dtype"], eps["dtype"] in ("float16", "bfloat16")
    zeros = [e for e in evidence if str(e["signal"]).startswith("exact zeros in")]
    h = Hypothesis(
        "precision" if low and eps["eps"] else "numerics",
        f"the optimizer's eps ({fmt(eps['eps'])}) is 0 in {dtype}: its update divides by "
        "sqrt(state) + eps, and where that state is exactly 0 the update is x/0"
        + (
            " (with Adam's defaults, (1 - beta2) * grad**2 is 0 in float16 for |grad| < 8e-3)"
            if dtype == "float16"
            else ""
        ),
        0.95,
        "print optimizer.param_groups[0]['eps'] and the dtype of the weights; count the exact "
        "zeros of the optimizer's state (exp_avg_sq for Adam)",
    )
    h.support.append(
        f"the update of step {origin.get('step')} wrote non-finite weights from finite "
        f"gradients, and eps {fmt(eps['eps'])} is {fmt(eps['value'])} as {dtype}"
    )
    h.support += [f"{e['signal']}: {e['value']} of {e['of']}" for e in zeros if e["value"]]
    f.ruled_out.append(
        {
            "cause": "learning rate too high",
            "why": "the update divided by an exact 0: a smaller learning rate scales x/0, it "
            "does not make it finite",
        }
    )
    return h


def _eps_fixes(h: Hypothesis) -> list[dict[str, object]]:
    if h.family == "precision":
        return [
            {
                "horizon": "immediate",
                "action": "keep the weights and the optimizer in float32 and train in mixed "
                "precision: torch.autocast(device_type, dtype=torch.float16) with "
                "torch.amp.GradScaler, instead of model.half()",
            },
            {
                "horizon": "short-term",
                "action": "if the weights must stay in float16, give the optimizer an eps "
                "float16 holds (eps=1e-4), or use bfloat16",
            },
        ]
    return [{"horizon": "immediate", "action": "give the optimizer an eps above 0 (1e-8)"}]


def _exploding(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = f"gradients far too large from {_at(f)}" + (
        ", ending in NaN/Inf" if _related(f, "nonfinite") else ""
    )
    init = Hypothesis(
        "initialization",
        "weight initialisation too large for the depth",
        0.4,
        "print each layer's output std at step 0 (run.activation(name, 'std')): "
        "a healthy network keeps it near 1",
    )
    lr = Hypothesis(
        "learning_rate",
        "learning rate too high",
        0.35,
        "re-run with the learning rate divided by 10",
    )
    rec = Hypothesis(
        "architecture",
        "a long recurrence without gating or clipping",
        0.1,
        "clip the gradient norm and compare gradient norms per time step",
    )
    arch = Hypothesis(
        "architecture",
        "a deep stack without normalisation or residual connections",
        0.15,
        "add LayerNorm/BatchNorm between layers and compare the step-0 gradient norms",
    )
    if f.step is not None and f.step >= 50:
        init.against.append(
            f"the first {f.step} steps trained with ordinary gradients: an initialisation "
            "that is too large shows from step 0"
        )
    if f.step == 0:
        init.support.append("the gradients are too large at step 0, before any update")
        lr.against.append("the problem is there at step 0, before the learning rate acted")
        f.ruled_out.append(
            {
                "cause": "learning rate too high",
                "why": "the gradients were already too large at step 0, before any update",
            }
        )
    elif (r := _lr_ruled_out(facts, f)) is not None:
        lr.against.append(r["why"])
        f.ruled_out.append(r)
    elif facts.max_update_ratio is not None:
        lr.support.append(_update_note(facts) or "")
    poor = _related(f, "poor_initialization")
    if poor:
        init.support.append(str(poor["summary"]))
    if _related(f, "loss_divergence"):
        lr.support.append("the loss diverged")
    ungated = sorted(facts.module_types & {"RNN", "RNNCell"})
    if ungated:
        rec.support.append(f"the model has ungated recurrent layers ({', '.join(ungated)})")
    elif facts.recurrent:
        rec.support.append("the model has recurrent layers (gated)")
    else:
        rec.against.append("the model has no recurrent layers")
    if facts.normalised:
        arch.against.append("the model has normalisation layers")
    elif facts.depth >= 6:
        arch.support.append(f"{facts.depth} weight layers and no normalisation layer")
    immediate = [_clip_fix(facts)]
    if f.step != 0:  # at step 0 the learning rate has not acted yet
        lower = _lr_fix(0.1, "lower the learning rate by 10x")
        # the fix of the likelier cause comes first (``gradoc run --fix`` tries it)
        immediate.insert(0 if lr.score > max(init.score, rec.score) else 1, lower)
    f.fixes += immediate
    f.fixes += [
        {"horizon": "short-term", "action": _init_advice(facts)},
        {
            "horizon": "long-term",
            "action": "add normalisation (LayerNorm/BatchNorm) and residual "
            "connections"
            + ("; use gated cells (LSTM/GRU) for recurrences" if facts.recurrent else ""),
        },
    ]
    f.monitoring += [
        "global gradient norm with an alert at 10x its moving average",
        "update/weight ratio per layer (healthy ~1e-3)",
    ]
    _clipping(f, lr, facts)
    return [init, lr, arch, rec]


def _vanishing(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = "the input-side layers get almost no gradient, so they barely learn"
    sat = Hypothesis(
        "architecture",
        "saturating activations (sigmoid/tanh) repeated through depth",
        0.4,
        "swap the activation for ReLU/GELU and compare the first layer's gradient norm",
    )
    init = Hypothesis(
        "initialization",
        "initialisation too small for the depth",
        0.3,
        "print each layer's output std at step 0: it should not shrink layer after layer",
    )
    dead = Hypothesis(
        "gradients",
        "dead ReLU units blocking the gradient",
        0.2,
        "look at the per-unit activity of the ReLU layers (run.unit_active)",
    )
    if facts.saturating:
        sat.support.append(
            f"the model uses {', '.join(facts.saturating)} across {facts.depth} layers"
        )
        sigmoids = sum(1 for m in h.modules if m.type == "Sigmoid")
        if sigmoids >= 3:
            sat.support.append(
                f"sigmoid's derivative is at most 0.25: {sigmoids} sigmoid layers scale the "
                f"gradient by at most 0.25^{sigmoids} = {fmt(0.25**sigmoids)}"
            )
    else:
        sat.against.append("the model has no sigmoid/tanh-family module")
    if _related(f, "poor_initialization"):
        init.support.append(str(_related(f, "poor_initialization")["summary"]))  # type: ignore[index]
    _weight_gain_evidence(init, facts)
    if _related(f, "dead_units"):
        dead.support.append(str(_related(f, "dead_units")["summary"]))  # type: ignore[index]
    elif facts.relu_like:
        dead.against.append("no ReLU layer has a majority of dead units")
    else:
        dead.against.append("the model has no ReLU-family module")
    last = [p for p in h.params if p.shape and len(p.shape) >= 2]
    if last:
        g = h.param(last[-1].name, "grad_norm").values
        if g and math.isfinite(g[-1]) and g[-1] > 1e-4:
            f.ruled_out.append(
                {
                    "cause": "a data or loss problem (nothing to learn)",
                    "why": f"the output layer {last[-1].name} still gets gradient "
                    f"norm {fmt(g[-1])}: the signal is lost on the way down",
                }
            )
    if facts.lr is not None:
        f.ruled_out.append(
            {
                "cause": "learning rate too low",
                "why": f"the learning rate is {fmt(facts.lr)} and the output side learns; "
                "a higher rate would not reach layers whose gradient is ~0",
            }
        )
    # the fix of the likelier cause comes first; an activation swap only where the model
    # has saturating activations to swap
    first, then = {"action": _init_advice(facts)}, None
    if facts.saturating:
        swap = {
            "action": f"switch the hidden {'/'.join(facts.saturating)} activations to ReLU "
            "or GELU (keep sigmoid for gates and outputs)"
        }
        first, then = (swap, first) if sat.score >= init.score else (first, swap)
    f.fixes += [{"horizon": "immediate", **first}]
    f.fixes += [{"horizon": "short-term", **then}] if then else []
    f.fixes += [
        {
            "horizon": "long-term",
            "action": "add normalisation and residual connections so gradient "
            "has a short path to the input layers",
        },
    ]
    f.monitoring += [
        "gradient norm of the first and last layer, and their ratio (alert below 1e-3)"
    ]
    return [sat, init, dead]


def _weight_gain_evidence(init: Hypothesis, facts: Facts) -> None:
    """Whether the weights' own scale at the start explains a gradient lost through depth:
    each matrix scales the gradient passing back through it by ``||W|| / sqrt(fan-in)``;
    a variance-preserving initialisation makes that 1 (sqrt(2) in front of a ReLU, which
    halves the variance). Support when the product alone falls below the detector's
    ratio; against when it loses less than 10x."""
    gains = facts.weight_gains or []
    if len(gains) < vanishing.MIN_LAYERS:
        return
    g = statistics.median(gains)
    keep, relu = (math.sqrt(2), " for ReLU layers") if facts.relu_like else (1.0, "")
    depth = len(gains) - 1  # the matrices between the last layer's gradient and the first's
    product = (g / keep) ** depth
    scale = (
        f"at the start each weight matrix scales the gradient passing back through it by "
        f"~{fmt(g)}, the median of ||W||/sqrt(fan-in), where {fmt(keep)} keeps it{relu}"
    )
    if product < vanishing.RATIO:
        init.support.append(
            f"{scale}; across {depth} matrices that is {fmt(g / keep)}^{depth} = "
            f"{fmt(product)}, enough by itself to lose the gradient"
        )
    elif product >= 0.1:
        init.against.append(f"{scale}; across {depth} matrices it loses at most 10x")


def _dead(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = f"most units of {f.layer} output 0 for every input, so they never learn"
    bias = Hypothesis(
        "initialization",
        "a negative bias or initialisation that puts units below zero from the start",
        0.4,
        "print the layer's bias and pre-activation mean at step 0",
    )
    lr = Hypothesis(
        "learning_rate",
        "a learning rate high enough to knock units into the dead zone",
        0.3,
        "re-run with a lower learning rate and watch the dead share over time",
    )
    if f.step == 0:
        bias.support.append(
            "the units were dead at the first sample (step 0), before training moved them"
        )
        lr.against.append("the units were dead before any update")
        f.ruled_out.append(
            {
                "cause": "learning rate too high",
                "why": "the units were already dead at step 0, before any update",
            }
        )
    elif facts.max_update_ratio is not None and facts.max_update_ratio > 1e-2:
        lr.support.append(_update_note(facts) or "")
    f.fixes += [
        {
            "horizon": "immediate",
            "action": "re-initialise the biases of the layer before it to 0 "
            "(or a small positive value such as 0.01)",
        },
        {
            "horizon": "short-term",
            "action": "use LeakyReLU/GELU, or put BatchNorm/LayerNorm before the ReLU",
        },
        {
            "horizon": "long-term",
            "action": "monitor the dead share per layer and lower the learning rate "
            "if it grows during training",
        },
    ]
    f.monitoring += ["share of units active on < 1% of inputs, per ReLU layer"]
    return [bias, lr]


def _saturated(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = (
        f"the outputs of {f.layer} sit at the flat ends of the activation, passing no gradient"
    )
    init = Hypothesis(
        "initialization",
        "pre-activations too large because of the initialisation scale",
        0.4,
        "print the std of the layer feeding it at step 0: above ~2 saturates tanh",
    )
    inputs = Hypothesis(
        "data", "unnormalised inputs", 0.25, "print the mean and std of a batch of inputs"
    )
    if f.step == 0:
        init.support.append("saturated at the first sample (step 0)")
    f.fixes += [
        {"horizon": "immediate", "action": _init_advice(facts)},
        {
            "horizon": "short-term",
            "action": "normalise the inputs and add LayerNorm/BatchNorm before the activation",
        },
        {
            "horizon": "long-term",
            "action": "prefer ReLU/GELU hidden activations; keep sigmoid for gates and outputs",
        },
    ]
    f.monitoring += ["saturated fraction of sigmoid/tanh outputs (alert above 50%)"]
    return [init, inputs]


def _spike(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = f"the loss jumped at {_at(f)} and came back"
    count = f.details.get("spikes", 1)
    batch = Hypothesis(
        "data",
        "one bad batch (corrupted, mislabelled or extreme inputs)",
        0.5,
        f"log the indices of the batch at {_at(f)} and inspect it",
    )
    lr = Hypothesis(
        "learning_rate",
        "instability from a learning rate near its limit",
        0.25,
        "re-run with a lower learning rate or a longer warm-up",
    )
    if count == 1:
        batch.support.append("a single spike in the whole run")
        lr.against.append("a learning-rate instability repeats; this happened once")
    else:
        lr.support.append(f"{count} spikes in the run")
    f.ruled_out.append(
        {
            "cause": "loss divergence",
            "why": "the loss came back to its earlier level within 50 steps",
        }
    )
    f.fixes += [
        _clip_fix(facts),
        {
            "horizon": "short-term",
            "action": "validate batches (finite, in range) and skip steps whose "
            "loss z-score exceeds 6",
        },
        {
            "horizon": "long-term",
            "action": "keep checkpoints from before spikes and log batch indices "
            "with each step so bad samples can be found",
        },
    ]
    f.monitoring += ["rolling z-score of the loss (alert above 6)", "global gradient norm per step"]
    return [batch, lr]


def _divergence(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = f"the loss climbs from {_at(f)} and does not come back"
    lr = Hypothesis(
        "learning_rate",
        "learning rate too high",
        0.5,
        "re-run with the learning rate divided by 10",
    )
    grad = Hypothesis(
        "gradients", "exploding gradients", 0.3, "plot the global gradient norm around the onset"
    )
    if facts.max_update_ratio is not None and facts.max_update_ratio > 1e-2:
        lr.support.append(_update_note(facts) or "")
    if _related(f, "large_updates"):
        lr.support.append(str(_related(f, "large_updates")["summary"]))  # type: ignore[index]
    f.ruled_out.append(
        {
            "cause": "overfitting",
            "why": "overfitting lowers the training loss; here the training loss itself rises",
        }
    )
    f.fixes += [
        _lr_fix(0.1, "lower the learning rate by 10x and resume from before the onset"),
        {"horizon": "short-term", "action": "add a warm-up and " + _clip_advice(facts)},
        {"horizon": "long-term", "action": "choose the learning rate with a range test; decay it"},
    ]
    f.monitoring += ["smoothed loss against its best so far (alert at 2x)"]
    _clipping(f, lr, facts)
    return [lr, grad]


def _blowup(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    d = f.details
    came_back = d.get("came_back_at")
    f.symptom = f"the loss rose {fmt(d['peak_ratio'])}x above where it started, from {_at(f)}" + (
        f", and came back by step {came_back}" if came_back is not None else ""
    )
    lr = Hypothesis(
        "learning_rate",
        "learning rate too high",
        0.6,
        "re-run with the learning rate divided by 10: the first steps should lower the loss",
    )
    init = Hypothesis(
        "initialization",
        "weights or output logits initialised too large",
        0.2,
        "print the loss at step 0 and each layer's output std at step 0",
    )
    data = Hypothesis(
        "data",
        "a harder or corrupted stretch of data",
        0.15,
        f"inspect the batches around {_at(f)}",
    )
    if f.step is not None and f.step <= 20:
        lr.support.append(
            f"the loss rose within the first {f.step + 1} steps: a workable learning rate "
            "lowers it from the start"
        )
    if facts.first_update_ratio is not None and facts.first_update_ratio > 1e-2:
        lr.support.append(
            f"the first update moved a weight matrix by {fmt(facts.first_update_ratio)} of "
            "its norm (healthy: ~1e-3)"
        )
    elif facts.first_update_ratio is not None:
        lr.against.append(
            f"the first update moved the weights by at most {fmt(facts.first_update_ratio)} "
            "of their norm"
        )
    peak_norm = _peak_grad_norm(h, f.step)
    if peak_norm is not None and facts.grad_median:
        lr.support.append(
            f"the gradient norm rose to {fmt(peak_norm)} from a median of {fmt(facts.grad_median)}"
        )
    for r in f.related:
        if r["kind"] == "dead_units":
            lr.support.append(f"units died after the blow-up ({r['summary']})")
        elif r["kind"] == "loss_plateau":
            lr.support.append("the loss never got below where the blow-up left it")
    k = _at_chance(d.get("end_loss"), h)
    if k is not None:
        f.symptom += f"; it ended at ln({k}), chance level: the model predicts nothing"
        lr.support.append(f"the loss ended at chance level, ln({k}) = {fmt(math.log(k))}")
    start_k = ce_classes(h)
    if start_k and d.get("start_loss", 0) > 1.5 * math.log(start_k):
        init.support.append(
            f"the loss started at {fmt(d['start_loss'])}, above chance (ln({start_k}) = "
            f"{fmt(math.log(start_k))})"
        )
    sustained = came_back is None or came_back - (f.step or 0) >= 3
    if sustained:
        data.against.append("the loss stayed up for many steps; one bad batch spikes once")
        f.ruled_out.append(
            {
                "cause": "one bad batch",
                "why": f"the smoothed loss stayed above 2x its start from {_at(f)}"
                + (f" to step {came_back}" if came_back is not None else " to the end"),
            }
        )
    f.ruled_out.append(
        {
            "cause": "overfitting",
            "why": "overfitting lowers the training loss; here the training loss itself rose",
        }
    )
    f.fixes += [
        _lr_fix(0.1, "lower the learning rate by 10x: the loss should fall from the first steps"),
        {
            "horizon": "short-term",
            "action": "add a learning-rate warm-up and " + _clip_advice(facts),
        },
        {
            "horizon": "long-term",
            "action": "choose the learning rate with a range test: the largest rate whose "
            "loss still falls over the first steps",
        },
    ]
    f.monitoring += ["the loss against its start level over the first steps (alert at 2x)"]
    _clipping(f, lr, facts)
    return [lr, init, data]


def _peak_grad_norm(h: History, after: int | None) -> float | None:
    values = [
        v
        for s, v in zip(h.grad_norm.steps, h.grad_norm.values)
        if after is not None and s >= after and math.isfinite(v)
    ]
    return max(values) if values else None


def _plateau(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = "the loss does not go down: the model is not learning"
    late = f.details.get("late_loss")
    data = Hypothesis(
        "data",
        "inputs and labels that carry no learnable relation (misaligned or shuffled "
        "labels, wrong target column)",
        0.3,
        "train on a single batch: a working pipeline overfits it within ~100 steps",
    )
    lr = Hypothesis(
        "learning_rate", "learning rate too low", 0.3, "re-run with the learning rate 10x higher"
    )
    blocked = Hypothesis(
        "gradients",
        "gradient blocked inside the model (dead or saturated units, vanishing)",
        0.2,
        "check the other findings and per-layer gradient norms",
    )
    k = _at_chance(late, h)
    high = Hypothesis(
        "learning_rate",
        "learning rate too high: the first updates threw the model out of its basin and it "
        "settled where it learns nothing",
        0.2,
        "re-run with the learning rate divided by 10: the loss should fall from the start",
    )
    if facts.early_peak_loss is not None:
        high.prior = 0.6
        high.support.append(
            f"the loss rose to {fmt(facts.early_peak_loss)} in the first steps, from "
            f"{fmt(h.loss.values[0])}"
        )
        lr.against.append("the loss rose in the first steps: the updates were too big")
    if facts.first_update_ratio is not None and facts.first_update_ratio > 0.1:
        high.support.append(
            f"the first update moved a weight matrix by {fmt(facts.first_update_ratio)} of its "
            f"norm (healthy ~1e-3)"
        )
    if k is not None:
        data.support.append(
            f"the loss sits at {fmt(math.log(k))} = ln({k}): chance for {k} classes"
        )
    if facts.median_update_ratio is not None:
        (lr.support if facts.median_update_ratio < 1e-5 else lr.against).append(
            f"median update/weight ratio {fmt(facts.median_update_ratio)} (healthy ~1e-3)"
        )
    causes = [
        r
        for r in f.related
        if r["kind"] in ("dead_units", "vanishing_gradients", "saturated_units", "tiny_updates")
    ]
    ungated = sorted(facts.module_types & {"RNN", "RNNCell"})
    through_time = Hypothesis(
        "architecture",
        "an ungated recurrence: gradients vanish through time, so what a long sequence starts "
        "with never reaches the loss",
        0.3,
        "train a gated cell (LSTM/GRU) or shorter sequences on the same data: a drop in the "
        "loss confirms it",
    )
    if ungated:
        # the commonest reason a vanilla RNN does not learn: it outranks the data on a tie
        through_time.prior = 0.45
        through_time.support.append(
            f"the model has ungated recurrent layers ({', '.join(ungated)})"
        )
        f.fixes.append(
            {
                "horizon": "short-term",
                "action": "replace the vanilla RNN with an LSTM or GRU (forget-gate bias ~1-3), "
                "and clip the gradient norm",
            }
        )
    if causes:
        blocked.support += [str(r["summary"]) for r in causes]
    elif not ungated:  # the layer ratio does not see vanishing through time
        blocked.against.append("no dead, saturated or vanishing layer was found")
        f.ruled_out.append(
            {
                "cause": "dead ReLUs or vanishing gradients",
                "why": "no layer has a majority of dead units and the first/last "
                "gradient ratio stayed above 1e-3",
            }
        )
    f.fixes += [
        {
            "horizon": "immediate",
            "action": "overfit one batch to check that inputs and labels line up",
        },
        {
            "horizon": "short-term",
            "action": "raise the learning rate (a range test finds the best one)",
        },
        {
            "horizon": "long-term",
            "action": "add a validation metric against a trivial baseline "
            "(majority class) to see learning start",
        },
    ]
    f.monitoring += ["loss against the trivial baseline", "update/weight ratio per layer"]
    if high.support:
        f.fixes.insert(0, _lr_fix(0.1, "lower the learning rate by 10x"))
    return [data, lr, blocked, high] + ([through_time] if ungated else [])


def _poor_init(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    if f.details.get("rule") == "chance":
        return _too_confident(f, h, facts)
    f.symptom = "activations change scale layer after layer from the first step"
    init = Hypothesis(
        "initialization",
        "weights initialised at the wrong scale for the activation",
        0.6,
        "compare nn.init.calculate_gain for the activation with the weights' std x sqrt(fan_in)",
    )
    f.fixes += [
        {"horizon": "immediate", "action": _init_advice(facts)},
        {
            "horizon": "long-term",
            "action": "add normalisation layers so the scale cannot drift with depth",
        },
    ]
    f.monitoring += ["output std per layer at step 0 (gradoc records it)"]
    return [init]


def _too_confident(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    d = f.details
    head = f.layer or "the output layer"
    f.symptom = (
        f"the model starts out confidently wrong: its first loss is {fmt(d['start_loss'])} "
        f"where a fresh {d['classes']}-class model gives ~{fmt(d['chance'])}"
    )
    scale = Hypothesis(
        "initialization",
        "weights initialised too large (the std of the embeddings and linear layers), so "
        "the initial logits are large",
        0.6,
        f"print the std of {head}'s output at step 0: near 0 gives a loss of ln(k)",
    )
    logit = Hypothesis(
        "architecture",
        "a logit scale or temperature that multiplies the outputs",
        0.25,
        "look for a multiplication of the logits before the loss",
    )
    if facts.depth:
        scale.support.append(
            f"the loss at step 0 is {fmt(d['start_loss'] / d['chance'])}x chance before any update"
        )
    f.ruled_out.append(
        {
            "cause": "learning rate too high",
            "why": "the loss is too high at step 0, before the learning rate acted",
        }
    )
    f.fixes += [
        {
            "horizon": "immediate",
            "action": "initialise the weights small: normal(0, 0.02) for embeddings and "
            f"linear layers as GPT-2 does, and zero (or scale down) {head}",
        },
        {
            "horizon": "long-term",
            "action": "assert in a test that the step-0 loss is within ~10% of ln(classes)",
        },
    ]
    f.monitoring += ["the loss at step 0 against ln(number of classes)"]
    return [scale, logit]


def _large(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = f"single optimizer steps move weights by a large part of their size from {_at(f)}"
    lr = Hypothesis(
        "learning_rate",
        "learning rate too high",
        0.6,
        "re-run with the learning rate divided by 10",
    )
    d = f.details
    if d.get("rule") == "adam_lr":  # the rate itself, against the weights it moves
        f.symptom = (
            f"the learning rate ({fmt(d['lr'])}) is {fmt(d['ratio'])}x the weights' typical "
            "size, so each optimizer step can rewrite them"
        )
        lr.support.append(
            f"learning rate {fmt(d['lr'])} against weights of RMS {fmt(d['weight_rms'])}: "
            "an Adam-family step moves each weight by about the learning rate"
        )
    elif facts.lr is not None:
        lr.support.append(f"learning rate {fmt(facts.lr)}")
    f.fixes += [
        _lr_fix(0.1, "lower the learning rate by 10x"),
        {
            "horizon": "short-term",
            "action": _clip_advice(facts)
            if facts.clip is not None
            else "add a warm-up and gradient clipping",
        },
    ]
    f.monitoring += ["update/weight ratio per layer (healthy ~1e-3, alert above 0.1)"]
    _clipping(f, lr, facts)
    return [lr]


def _tiny(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = "the optimizer steps do not change the weights"
    lr = Hypothesis(
        "learning_rate",
        "learning rate far too low (or a scheduler that decayed it to ~0)",
        0.5,
        "print optimizer.param_groups[i]['lr'] at the failing steps",
    )
    grad = Hypothesis(
        "gradients",
        "gradients that are ~0 (vanishing or dead units)",
        0.3,
        "print the gradient norms of the stuck layers",
    )
    if facts.lr is not None:
        (lr.support if facts.lr < 1e-6 else lr.against).append(f"learning rate {fmt(facts.lr)}")
    if _related(f, "vanishing_gradients") or _related(f, "dead_units"):
        grad.support.append("gradients vanish or units are dead in this run")
    f.fixes += [
        _lr_fix(10.0, "check the learning rate and the scheduler; raise it (10x to start)"),
        {
            "horizon": "short-term",
            "action": "make sure the layers meant to train are not frozen or detached",
        },
    ]
    f.monitoring += [
        "learning rate per param group",
        "update/weight ratio per layer (alert below 1e-8)",
    ]
    return [lr, grad]


def _amp_advice(h: History) -> dict[str, object]:
    from ..detect.precision import advice

    return advice(h.meta.get("amp") or {})


def _fp16_overflow(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    where = f.layer or "(model)"
    f.symptom = f"under fp16 autocast, {where} would produce inf (and NaN downstream)"
    reduce = Hypothesis(
        "precision",
        "an unscaled reduction (a sum over a long sequence or many features) or unnormalised "
        "inputs grow the values past fp16's 65504",
        0.6,
        f"print {where}'s output max |x| for long and short inputs: it grows with the length",
    )
    big = Hypothesis(
        "precision",
        "weights or inputs at a scale that fp32 tolerates but fp16 does not",
        0.3,
        "compare the input scale and the layer's weight norm with a normalised baseline",
    )
    adv = _amp_advice(h)
    f.fixes += [
        {
            "horizon": "immediate",
            "action": f"keep {where} in fp32: run it under torch.autocast(device_type, "
            "enabled=False) on .float() inputs, or train in bf16 (fp32's range)",
        },
        {
            "horizon": "short-term",
            "action": f"rescale {where}: a mean instead of a sum (divide by the length), "
            "1/sqrt(d) scaling, or a normalisation layer before it",
        },
        {
            "horizon": "long-term",
            "action": "prefer bf16 autocast where the hardware has it; keep a readiness "
            "check (gradoc run --check amp) in CI for model changes",
        },
    ]
    f.monitoring += [f"max |output| of {where} per step, alert above 3e4 (half of fp16's max)"]
    if adv.get("prefer_bf16"):
        f.evidence.append({"signal": "recommendation", "value": f"bf16 ({adv['why']})"})
    return [reduce, big]


def _fp16_underflow(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    where = f.layer or "(model)"
    adv = _amp_advice(h)
    f.symptom = f"under fp16, values of {where} would flush to zero and stop its learning"
    small = Hypothesis(
        "gradients",
        "gradients (or outputs) far smaller than the rest of the model: a tiny learning "
        "signal at that layer, or a very small loss",
        0.5,
        "print the gradient's exponent range (run.meta['amp']) and the loss value",
    )
    scale = adv.get("loss_scale")
    f.fixes += [
        {
            "horizon": "immediate",
            "action": "use torch.amp.GradScaler"
            + (f"(init_scale={scale})" if scale else "")
            + "; or train in bf16, whose range needs no loss scaling",
        },
        {
            "horizon": "short-term",
            "action": f"keep {where} in fp32 under autocast, or rescale the loss so that "
            "gradients sit well inside fp16's range",
        },
    ]
    f.monitoring += ["GradScaler's scale and skipped steps per step"]
    return [small]


def _padding_leak(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    where = f.layer or "(model)"
    f.symptom = "the output for real tokens depends on what the padded positions hold"
    low = where.lower()
    attn = Hypothesis(
        "masking",
        "attention without a padding mask: real tokens attend to the pads",
        0.7 if "attn" in low or "attention" in low else 0.2,
        "pass the mask (src_key_padding_mask=tokens == pad_id, attention_mask=...) and re-audit",
    )
    pool = Hypothesis(
        "masking",
        "a mean (or sum) over the sequence that includes the padded positions",
        0.7 if "pool" in low or "mean" in low else 0.2,
        "compare with a masked mean: (h * mask).sum(1) / mask.sum(1)",
    )
    rnn = Hypothesis(
        "masking",
        "a recurrent layer run over the pads (its final state has read them)",
        0.7 if any(k in low for k in ("rnn", "lstm", "gru")) else 0.1,
        "pack the batch: nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)",
    )
    norm = Hypothesis(
        "masking",
        "a BatchNorm over the sequence axis: pads enter the batch statistics",
        0.6 if "norm" in low or "bn" in low else 0.1,
        "normalise over real positions only, or use LayerNorm",
    )
    f.fixes += [
        {
            "horizon": "immediate",
            "action": f"mask the padding at {where}: a key padding / attention mask, a masked "
            "mean, or pack_padded_sequence for RNNs",
        },
        {
            "horizon": "short-term",
            "action": "add gradoc.audit_padding(model, batch, pad_mask=...) to the model's tests",
        },
        {
            "horizon": "long-term",
            "action": "bucket batches by length (gradoc.data.LengthBucketSampler) so less "
            "padding is computed at all",
        },
    ]
    f.monitoring += ["the padding ratio per batch", "gradoc run --check padding on new models"]
    return [attn, pool, rnn, norm]


def _loss_padding(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = "the loss is computed at padded positions as well"
    cause = Hypothesis(
        "masking",
        "the loss has no ignore_index (or loss mask) for padded targets",
        0.8,
        "set padded targets to -100 (nn.CrossEntropyLoss's ignore_index) or multiply the "
        "per-position loss by the mask before averaging",
    )
    if f.details.get("model_loss"):  # the model computed it from labels= (Hugging Face)
        action = (
            "set the labels to -100 at padded positions, which the model's loss ignores: "
            "labels = input_ids.masked_fill(attention_mask == 0, -100)"
        )
    else:
        action = (
            "F.cross_entropy(logits, targets, ignore_index=PAD) with padded targets set to "
            "PAD, or (loss * mask).sum() / mask.sum()"
        )
    f.fixes += [{"horizon": "immediate", "action": action}]
    return [cause]


def _length_anomaly(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = "a batch arrived with sequence lengths outside the range seen before"
    edge = Hypothesis(
        "numerics",
        "edge-case lengths (1 or 2 tokens, or very long) the model's code was never run on",
        0.6,
        "run gradoc.testing.check_numerics(model, example) on lengths 1 and 2",
    )
    f.fixes += [
        {
            "horizon": "immediate",
            "action": "test the model on the edge lengths (gradoc.testing.assert_finite)",
        },
        {
            "horizon": "short-term",
            "action": "validate lengths in the data pipeline (filter or pad very short samples)",
        },
    ]
    f.monitoring += ["min and max sequence length per batch (gradoc records them)"]
    return [edge]


def _padding_waste(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = "much of the compute goes to padded positions"
    f.fixes += [
        {
            "horizon": "short-term",
            "action": "batch by length: gradoc.data.LengthBucketSampler or "
            "TokenBudgetBatchSampler (see benchmarks/bucketing.py)",
        }
    ]
    return [
        Hypothesis(
            "batching", "random batching of heavy-tailed lengths", 0.6, "plot the lengths per batch"
        )
    ]


# what weights that start at exactly zero look like: nothing learns
_STUCK = ("loss_plateau", "dead_units", "vanishing_gradients", "tiny_updates", "saturated_units")


def _zero_init(facts: Facts) -> Hypothesis:
    names = facts.zero_weights or []
    return Hypothesis(
        "initialization",
        "weights initialised to zero: every unit computes the same output and gets the same "
        "gradient, so the layers never differentiate",
        0.9,
        "print p.abs().max() for the weight matrices before training",
        support=[
            f"{len(names)} weight matrices had norm 0 at their first record "
            f"({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})"
        ],
    )


EXPLAIN: dict[str, Callable[[Finding, History, Facts], list[Hypothesis]]] = {
    "padding_leak": _padding_leak,
    "loss_includes_padding": _loss_padding,
    "length_anomaly": _length_anomaly,
    "padding_waste": _padding_waste,
    "fp16_overflow": _fp16_overflow,
    "fp16_underflow": _fp16_underflow,
    "nonfinite": _nonfinite,
    "exploding_gradients": _exploding,
    "vanishing_gradients": _vanishing,
    "dead_units": _dead,
    "saturated_units": _saturated,
    "loss_spike": _spike,
    "loss_blowup": _blowup,
    "loss_divergence": _divergence,
    "loss_plateau": _plateau,
    "poor_initialization": _poor_init,
    "large_updates": _large,
    "tiny_updates": _tiny,
}


HORIZONS = ("immediate", "short-term", "long-term")


def explain(f: Finding, h: History, facts: Facts) -> None:
    """Fill in the diagnosis of one finding, in place."""
    make = EXPLAIN.get(f.kind)
    if make is None:
        return
    made = make(f, h, facts)
    if facts.zero_weights and f.kind in _STUCK:
        made.append(_zero_init(facts))
    f.fixes.sort(key=lambda x: HORIZONS.index(x["horizon"]))  # stable: in order of likelihood
    hypotheses = sorted(made, key=lambda x: -x.score)
    for hyp in hypotheses:
        hyp.support = [s for s in hyp.support if s]
    f.hypotheses = [hyp.to_json() for hyp in hypotheses]
    top = hypotheses[0]
    f.root_cause_family = top.family
    f.root_cause = top.cause + (f" ({'; '.join(top.support)})" if top.support else "")
    for e in f.evidence:
        e.setdefault("type", "metric")  # detectors mark distributions themselves
