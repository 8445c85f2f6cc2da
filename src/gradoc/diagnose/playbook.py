"""What a senior engineer knows about each kind of problem, applied to this run's numbers."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from ..detect._util import fmt
from ..detect.finding import Finding
from ..detect.history import History
from .facts import Facts


@dataclass(slots=True)
class Hypothesis:
    cause: str
    prior: float
    check: str
    support: list[str] = field(default_factory=list)
    against: list[str] = field(default_factory=list)

    @property
    def score(self) -> float:
        return self.prior + 0.3 * len(self.support) - 0.4 * len(self.against)

    def to_json(self) -> dict[str, object]:
        likelihood = "high" if self.score >= 0.8 else "medium" if self.score >= 0.4 else "low"
        return {
            "cause": self.cause,
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
    return "a variance-preserving initialisation (Kaiming for ReLU-like, Xavier for tanh/sigmoid)"


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


# -- one explanation per kind -------------------------------------------------------------------
def _nonfinite(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = f"the loss or the gradients became NaN/Inf at {_at(f)}"
    grads_before = [
        v
        for s, v in zip(h.grad_norm.steps, h.grad_norm.values)
        if f.step is not None and s < f.step and math.isfinite(v)
    ]
    steady = bool(grads_before) and max(grads_before[-5:]) < 10 * (facts.grad_median or math.inf)
    op = Hypothesis(
        "a numerically unsafe operation in the forward pass (log of 0, division by 0, sqrt of a "
        "negative, exp overflow, a norm without epsilon)",
        0.5,
        "re-run the failing step under torch.autograd.detect_anomaly() or check each module's "
        "output with torch.isfinite to find the first non-finite one",
    )
    data = Hypothesis(
        "non-finite or extreme values in the input batch",
        0.3,
        f"assert torch.isfinite(batch).all() for the batch of {_at(f)}",
    )
    grow = Hypothesis(
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
    facts_of_op = [f"{e['signal']}: {e['value']}" for e in origin.get("evidence", [])]
    where = f" in {origin.get('module') or 'code outside the model'}"
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
        grow.prior = 0.9
        grow.support += facts_of_op
        f.ruled_out = [r for r in f.ruled_out if r["cause"] != "exploding gradients"]
    if f.step == 0:
        data.support.append("non-finite from the very first step: nothing was learnt yet")
        grow.against.append("there was no training before step 0 to grow anything")
    if origin and origin.get("phase") == "optimizer":
        f.fixes.append(_lr_fix(0.1, "lower the learning rate by 10x"))
    f.fixes += [
        {
            "horizon": "immediate",
            "action": f"restart from a checkpoint saved before {_at(f)} and skip "
            "steps whose loss is not finite (gradoc.watch(..., guard=True) or "
            "gradoc run --guard does it, and rolls back when they repeat)",
            "apply": {"skip_nonfinite": True},
        },
        {
            "horizon": "short-term",
            "action": "guard the operation that produced it: add an epsilon to "
            "divisors, log and sqrt arguments (x.clamp_min(1e-12)), use log_softmax "
            "instead of log(softmax)",
            **_code_at(origin),
        },
        {
            "horizon": "long-term",
            "action": f"add a numerics test for {origin.get('module') or 'the module'} on "
            "edge-case inputs (sequence lengths 1 and 2, empty, all-zero, very large) "
            "that asserts finite outputs and gradients",
        },
    ]
    f.monitoring += ["non-finite loss and gradients on every step (gradoc records them by default)"]
    for e in origin.get("evidence", []):
        if str(e["signal"]).startswith("`") and "failing batch" in str(e["signal"]):
            name = str(e["signal"]).split("`")[1]
            f.monitoring.append(
                f"the range of `{name}` in every batch (min / max), with an alert on values "
                "the model was never tested on"
            )
    return [op, data, grow]


def _exploding(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = f"gradients far too large from {_at(f)}" + (
        ", ending in NaN/Inf" if _related(f, "nonfinite") else ""
    )
    init = Hypothesis(
        "weight initialisation too large for the depth",
        0.4,
        "print each layer's output std at step 0 (run.activation(name, 'std')): "
        "a healthy network keeps it near 1",
    )
    lr = Hypothesis("learning rate too high", 0.35, "re-run with the learning rate divided by 10")
    rec = Hypothesis(
        "a long recurrence without gating or clipping",
        0.1,
        "clip the gradient norm and compare gradient norms per time step",
    )
    arch = Hypothesis(
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
    return [init, lr, arch, rec]


def _vanishing(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = "the input-side layers get almost no gradient, so they barely learn"
    sat = Hypothesis(
        "saturating activations (sigmoid/tanh) repeated through depth",
        0.4,
        "swap the activation for ReLU/GELU and compare the first layer's gradient norm",
    )
    init = Hypothesis(
        "initialisation too small for the depth",
        0.3,
        "print each layer's output std at step 0: it should not shrink layer after layer",
    )
    dead = Hypothesis(
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
        sat.against.append("the model has no sigmoid/tanh-family layers")
    if _related(f, "poor_initialization"):
        init.support.append(str(_related(f, "poor_initialization")["summary"]))  # type: ignore[index]
    if _related(f, "dead_units"):
        dead.support.append(str(_related(f, "dead_units")["summary"]))  # type: ignore[index]
    else:
        dead.against.append("no ReLU layer has a majority of dead units")
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
    f.fixes += [
        {
            "horizon": "immediate",
            "action": "switch sigmoid/tanh hidden activations to ReLU or GELU",
        },
        {"horizon": "short-term", "action": _init_advice(facts)},
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


def _dead(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = f"most units of {f.layer} output 0 for every input, so they never learn"
    bias = Hypothesis(
        "a negative bias or initialisation that puts units below zero from the start",
        0.4,
        "print the layer's bias and pre-activation mean at step 0",
    )
    lr = Hypothesis(
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
        "pre-activations too large because of the initialisation scale",
        0.4,
        "print the std of the layer feeding it at step 0: above ~2 saturates tanh",
    )
    inputs = Hypothesis("unnormalised inputs", 0.25, "print the mean and std of a batch of inputs")
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
    count = next((e["value"] for e in f.evidence if e["signal"] == "spikes in the run"), 1)
    batch = Hypothesis(
        "one bad batch (corrupted, mislabelled or extreme inputs)",
        0.5,
        f"log the indices of the batch at {_at(f)} and inspect it",
    )
    lr = Hypothesis(
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
    lr = Hypothesis("learning rate too high", 0.5, "re-run with the learning rate divided by 10")
    grad = Hypothesis("exploding gradients", 0.3, "plot the global gradient norm around the onset")
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
    return [lr, grad]


def _plateau(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = "the loss does not go down: the model is not learning"
    late = next(
        (e["value"] for e in f.evidence if e["signal"].startswith("median loss, last")), None
    )
    data = Hypothesis(
        "inputs and labels that carry no learnable relation (misaligned or shuffled "
        "labels, wrong target column)",
        0.3,
        "train on a single batch: a working pipeline overfits it within ~100 steps",
    )
    lr = Hypothesis("learning rate too low", 0.3, "re-run with the learning rate 10x higher")
    blocked = Hypothesis(
        "gradient blocked inside the model (dead or saturated units, vanishing)",
        0.2,
        "check the other findings and per-layer gradient norms",
    )
    try:
        value = float(str(late))
        k = round(math.exp(value)) if value < 10 else 0  # ln(1000) < 7
        if 2 <= k <= 1000 and abs(value - math.log(k)) < 0.02 * math.log(k):
            data.support.append(
                f"the loss sits at {fmt(value)} ≈ ln({k}): chance level for {k} classes"
            )
    except ValueError:
        pass
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
    return [data, lr, blocked] + ([through_time] if ungated else [])


def _poor_init(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = "activations change scale layer after layer from the first step"
    init = Hypothesis(
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


def _large(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = f"single optimizer steps move weights by a large part of their size from {_at(f)}"
    lr = Hypothesis("learning rate too high", 0.6, "re-run with the learning rate divided by 10")
    if facts.lr is not None:
        lr.support.append(f"learning rate {fmt(facts.lr)}")
    f.fixes += [
        _lr_fix(0.1, "lower the learning rate by 10x"),
        {"horizon": "short-term", "action": "add a warm-up and gradient clipping"},
    ]
    f.monitoring += ["update/weight ratio per layer (healthy ~1e-3, alert above 0.1)"]
    return [lr]


def _tiny(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = "the optimizer steps do not change the weights"
    lr = Hypothesis(
        "learning rate far too low (or a scheduler that decayed it to ~0)",
        0.5,
        "print optimizer.param_groups[i]['lr'] at the failing steps",
    )
    grad = Hypothesis(
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
        "an unscaled reduction (a sum over a long sequence or many features) or unnormalised "
        "inputs grow the values past fp16's 65504",
        0.6,
        f"print {where}'s output max |x| for long and short inputs: it grows with the length",
    )
    big = Hypothesis(
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
        "attention without a padding mask: real tokens attend to the pads",
        0.7 if "attn" in low or "attention" in low else 0.2,
        "pass the mask (src_key_padding_mask=tokens == pad_id, attention_mask=...) and re-audit",
    )
    pool = Hypothesis(
        "a mean (or sum) over the sequence that includes the padded positions",
        0.7 if "pool" in low or "mean" in low else 0.2,
        "compare with a masked mean: (h * mask).sum(1) / mask.sum(1)",
    )
    rnn = Hypothesis(
        "a recurrent layer run over the pads (its final state has read them)",
        0.7 if any(k in low for k in ("rnn", "lstm", "gru")) else 0.1,
        "pack the batch: nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)",
    )
    norm = Hypothesis(
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
        "the loss has no ignore_index (or loss mask) for padded targets",
        0.8,
        "set padded targets to -100 (nn.CrossEntropyLoss's ignore_index) or multiply the "
        "per-position loss by the mask before averaging",
    )
    f.fixes += [
        {
            "horizon": "immediate",
            "action": "F.cross_entropy(logits, targets, ignore_index=PAD) with padded targets "
            "set to PAD, or (loss * mask).sum() / mask.sum()",
        }
    ]
    return [cause]


def _length_anomaly(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = "a batch arrived with sequence lengths outside the range seen before"
    edge = Hypothesis(
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
        Hypothesis("random batching of heavy-tailed lengths", 0.6, "plot the lengths per batch")
    ]


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
    "loss_divergence": _divergence,
    "loss_plateau": _plateau,
    "poor_initialization": _poor_init,
    "large_updates": _large,
    "tiny_updates": _tiny,
}


def explain(f: Finding, h: History, facts: Facts) -> None:
    """Fill in the diagnosis of one finding, in place."""
    make = EXPLAIN.get(f.kind)
    if make is None:
        return
    hypotheses = sorted(make(f, h, facts), key=lambda x: -x.score)
    for hyp in hypotheses:
        hyp.support = [s for s in hyp.support if s]
    f.hypotheses = [hyp.to_json() for hyp in hypotheses]
    top = hypotheses[0]
    f.root_cause = top.cause + (f" ({'; '.join(top.support)})" if top.support else "")
    for e in f.evidence:
        distribution = any(w in e["signal"] for w in ("share of units", "fraction", "std"))
        e.setdefault("type", "distribution" if distribution else "metric")
