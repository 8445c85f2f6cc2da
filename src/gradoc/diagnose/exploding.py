"""exploding_gradients: gradients far too large, from the start or growing in training."""

from __future__ import annotations

from ..detect.finding import (
    MODERATE,
    STRONG,
    WEAK,
    Family,
    Finding,
    Fix,
    Horizon,
    Hypothesis,
    Kind,
    RuledOut,
)
from ..detect.history import History
from .advice import (
    LR_TOO_HIGH,
    clip_fix,
    clipping,
    init_advice,
    lr_fix,
    lr_too_high,
    related,
    update_signs,
)
from .facts import Facts

KIND = Kind.EXPLODING_GRADIENTS
CAUSED_BY = (Kind.ACCUMULATING_GRADIENTS, Kind.LOSS_BLOWUP, Kind.POOR_INITIALIZATION)
CONSIDERS_ZERO_INIT = False


def explain(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = f"gradients far too large from step {f.step}" + (
        ", ending in NaN/Inf" if related(f, Kind.NONFINITE) else ""
    )
    init = Hypothesis(
        Family.INITIALIZATION,
        "weight initialisation too large for the depth",
        "print each layer's output std at step 0 (run.activation(name, 'std')): "
        "a healthy network keeps it near 1",
        base=0.2,
    )
    lr = lr_too_high(0.2)
    rec = Hypothesis(
        Family.ARCHITECTURE,
        "a long recurrence without gating or clipping",
        "clip the gradient norm and compare gradient norms per time step",
        base=0.05,
    )
    arch = Hypothesis(
        Family.ARCHITECTURE,
        "a deep stack without normalisation or residual connections",
        "add LayerNorm/BatchNorm between layers and compare the step-0 gradient norms",
        base=0.1,
    )
    if f.step == 0:
        init.seen("the gradients are too large at step 0, before any update", STRONG, step=0)
        lr.against("the problem is there at step 0, before the learning rate acted", STRONG, step=0)
        f.ruled_out.append(
            RuledOut(
                LR_TOO_HIGH,
                "the gradients were already too large at step 0, before any update",
            )
        )
    else:
        if f.step is not None and f.step >= 50:
            init.against(
                f"the first {f.step} steps trained with ordinary gradients: an initialisation "
                "that is too large shows from step 0",
                STRONG,
                step=f.step,
            )
        else:
            init.unseen("gradients too large at step 0 (they became so later)")
        update_signs(lr, facts, f)
    poor = related(f, Kind.POOR_INITIALIZATION)
    if poor:
        init.seen(str(poor["summary"]), STRONG, step=poor.get("step"))
    if related(f, Kind.LOSS_DIVERGENCE) or related(f, Kind.LOSS_BLOWUP):
        lr.seen("the loss rose with the gradients", WEAK)
    ungated = sorted(facts.module_types & {"RNN", "RNNCell"})
    if ungated:
        rec.seen(f"the model has ungated recurrent layers ({', '.join(ungated)})", MODERATE)
    elif facts.recurrent:
        rec.seen("the model has recurrent layers (gated)", WEAK)
    else:
        rec.against("the model has no recurrent layers", STRONG)
    if facts.normalised:
        arch.against("the model has normalisation layers", MODERATE)
    elif facts.depth >= 6:
        arch.seen(f"{facts.depth} weight layers and no normalisation layer", MODERATE)
    immediate = [clip_fix(facts)]
    if f.step != 0:  # at step 0 the learning rate has not acted yet
        lower = lr_fix(0.1, "lower the learning rate by 10x")
        # the fix of the likelier cause comes first (``gradoc run --fix`` tries it)
        immediate.insert(0 if lr.score > max(init.score, rec.score) else 1, lower)
    f.fixes += immediate
    f.fixes += [
        Fix(Horizon.SHORT_TERM, init_advice(facts)),
        Fix(
            Horizon.LONG_TERM,
            "add normalisation (LayerNorm/BatchNorm) and residual connections"
            + ("; use gated cells (LSTM/GRU) for recurrences" if facts.recurrent else ""),
        ),
    ]
    f.monitoring += [
        "global gradient norm with an alert at 10x its moving average",
        "update/weight ratio per layer (healthy ~1e-3)",
    ]
    clipping(f, lr, facts)
    return [init, lr, arch, rec]
