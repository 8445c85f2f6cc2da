"""attention_logit_growth: attention logits grow until the softmax is one-hot.

Needs: the attention calls read from the loss's graph (``collect.graph.attention``: every
``scaled_dot_product_attention``, ``nn.MultiheadAttention`` and explicit
``softmax(q @ k^T)``), read on the first 20 steps, then one step in 10 (or fewer, within
the budget): per layer, the largest
gap between a query row's largest and smallest logit (nats), and the rows' mean entropy as a
share of ``ln(keys)``.

The growth of attention logits until the attention's entropy collapses is the first of the two
instabilities of large transformers that Dehghani et al. (2023, ViT-22B) describe; Wortsman et
al. (2023, "Small-scale proxies for large-scale Transformer training instabilities") show it
in small models at high learning rates, removed there as at scale by qk-layernorm. It comes
before the loss shows it. In a 2-layer pre-norm character language model
(``benchmarks/precursors.py``, AdamW with a warm-up, 800 steps, two seeds): at the learning
rates that train (1e-3 to 3e-2) the largest gap reached 9 to 76 nats and the lowest entropy
share on any layer was 0.29 to 0.69; with qk-layernorm and z-loss at 0.1 and 0.3, 36 to 72
nats and 0.27 to 0.48. Without them, at 0.1 and above, one layer's gap passed 5e4 and its
entropy fell to 0: at 1.0 and 3.0 that came 63-76% of the steps before the loss blew up, at
0.3 before it stalled at 3.0 (the lower rates reach 1.5), at 0.1 at 2.4.

Rule: on one layer, the gap at least ``GAP_ONE_HOT`` (50 nats: the other keys' weights are
below 2e-22 of the largest's) and ``GROWTH`` (10) times the layer's gap at its first reads,
with the rows' mean entropy at most ``ENTROPY_LOW`` (0.1) of uniform; the same at the next
read too (the trend established, not one batch). Its step is the first of those reads. The
first layer to reach it is the finding's; the others are its evidence.

Harm: a statistic beyond what a healthy run shows, with its source: a softmax one-hot in
float32 on a layer whose logits grew tenfold since the start, the state in which Dehghani et
al. and Wortsman et al. saw the loss diverge. A warning; when the loss then diverges, blows up
or spikes, this heads that story with the lead it gave.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, RuledOut, Weight
from ..detect.history import Attention, History
from ..detect.signals import fmt
from .advice import LR_TOO_HIGH, lr_fix
from .facts import Facts
from .kind import Details, FindingKind

GAP_ONE_HOT = 50.0
GROWTH = 10.0
ENTROPY_LOW = 0.1
FIRST_READS = 3
"""Reads of a layer whose median gap is its start."""
_LOSS_KINDS = ("loss_divergence", "loss_blowup", "loss_spike", "loss_plateau", "nonfinite")
"""What this can lead: the loss's harm, for which its lead is told."""


@dataclass(slots=True)
class Growth(Details):
    """The layer, its head whose entropy fell lowest, and the numbers."""

    start_gap: float
    gap: float
    entropy: float
    head: int | None
    head_entropy: float | None
    peak_gap: float
    layers: int
    """Layers that reached the rule, this one included."""


def _collapse(a: Attention) -> tuple[int, float, float, float] | None:
    """The first read of ``a`` where the rule holds at it and at the next read: (its index,
    the start gap, the gap, the entropy share)."""
    gaps, shares = a.gap.values, a.entropy.values
    if len(gaps) < FIRST_READS + 2:
        return None
    start = statistics.median(gaps[:FIRST_READS])

    def collapsed(i: int) -> bool:
        g, e = gaps[i], shares[i]
        return g >= GAP_ONE_HOT and g >= GROWTH * max(start, 1e-9) and e <= ENTROPY_LOW

    for i in range(FIRST_READS, len(gaps) - 1):
        if collapsed(i) and collapsed(i + 1):
            return i, start, gaps[i], shares[i]
    return None


class AttentionLogitGrowth(FindingKind):
    """Attention logits grew until a layer's softmax is one-hot: a precursor of divergence.

    Diagnosed as a learning rate too high for attention without a bound on its logits
    (qk-layernorm, a logit cap), from the optimizer's settings and the layers' gap growth.
    """

    name = "attention_logit_growth"
    caused_by = ("nonfinite", "loss_blowup", "loss_divergence", "exploding_gradients")
    """Logits that grow after the loss blew up are its consequence (qk-layernorm's gains
    grow too once a learning rate of 1.0 has wrecked the weights), not its precursor."""
    link = 10  # the first link of the loss's divergence it precedes
    harm = (
        "A statistic beyond what a healthy run shows, with its source (Dehghani et al. 2023; "
        "Wortsman et al. 2023): a layer's attention one-hot in float32 (a logit gap of 50 "
        "nats or more, 10x its start, the rows' entropy under a tenth of uniform) at two reads "
        "in a row."
    )
    example_details = Growth(
        start_gap=3.1,
        gap=115.0,
        entropy=0.04,
        head=2,
        head_entropy=0.002,
        peak_gap=4500.0,
        layers=1,
    )

    def check(self, h: History) -> list[Finding]:
        found = [(c, a) for a in h.attention if (c := _collapse(a)) is not None]
        if not found:
            return []
        (i, start, gap, share), a = min(found, key=lambda x: x[1].gap.steps[x[0][0]])
        step = a.gap.steps[i]
        head, head_share = None, None
        if i < len(a.heads) and a.heads[i]:
            head, (_, head_share) = min(enumerate(a.heads[i]), key=lambda x: x[1][1])
        peak = max(g for g in a.gap.values if g == g)
        d = Growth(start, gap, share, head, head_share, peak, len(found))
        others = [b.layer for (_, b) in found if b is not a]
        evidence = [
            Evidence("largest attention logit gap at the first reads (median)", fmt(start)),
            Evidence(f"largest attention logit gap at step {step}", fmt(gap), step=step),
            Evidence("attention entropy, share of uniform", fmt(share), step=step),
            Evidence("largest gap in the run", fmt(peak)),
        ]
        if head is not None and head_share is not None:
            evidence.append(Evidence(f"head {head}'s entropy share", fmt(head_share), step=step))
        if others:
            evidence.append(Evidence("other layers one-hot", ", ".join(others[:4])))
        where = f" (head {head} at {fmt(head_share)})" if head is not None and head_share else ""
        return [
            self.found(
                severity="warning",
                step=step,
                layer=a.layer,
                summary=(
                    f"attention logits grew in {a.layer}: its largest logit gap went from "
                    f"{fmt(start)} to {fmt(gap)} nats by step {step} ({fmt(gap / start)}x) and "
                    f"its attention entropy fell to {fmt(share)} of uniform{where}: the softmax "
                    "is one-hot, the precursor of divergence in large transformers"
                ),
                evidence=evidence,
                details=d,
            )
        ]

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        d = Growth.of(f.details)
        f.symptom = (
            f"the attention of {f.layer} is one-hot: its logits grew {fmt(d.gap / d.start_gap)}x "
            "since the start while the loss did not yet show it"
        )
        lead = lead_over_the_loss(f)
        if lead is not None:
            f.evidence.append(lead)
        lr = Hypothesis(
            Family.LEARNING_RATE,
            f"{LR_TOO_HIGH} for attention whose logits nothing bounds (no qk-layernorm)",
            "re-run at a learning rate 3-10x lower, or with qk-layernorm: the largest logit "
            "gap should stay within a few times its start and the entropy above a tenth",
            base=0.3,
        )
        lr.seen(f.summary, Weight.DECISIVE, step=f.step)
        if facts.lr is not None:
            lr.seen(f"the learning rate was {fmt(facts.lr)} at the end", Weight.WEAK)
        if d.layers > 1:
            lr.seen(f"{d.layers} layers went one-hot", Weight.MODERATE)
        f.ruled_out.append(
            RuledOut(
                "a bad batch",
                f"the gap stayed over {fmt(GAP_ONE_HOT)} nats at two reads in a row, and grew "
                f"to {fmt(d.peak_gap)}: a batch spikes once",
            )
        )
        f.fixes += [
            Fix(
                Horizon.IMMEDIATE,
                "normalise the queries and keys per head before their product (qk-layernorm: "
                "q, k = F.layer_norm(q, (head_dim,)), F.layer_norm(k, (head_dim,)); Dehghani et "
                "al. 2023, Wortsman et al. 2023)",
            ),
            lr_fix(0.3, "lower the learning rate 3x, or lengthen its warm-up"),
            Fix(
                Horizon.LONG_TERM,
                "cap the attention logits (Gemma 2: 50 * tanh(logits / 50)) and watch the "
                "largest attention logit per layer as the learning rate is raised",
            ),
        ]
        f.monitoring.append(
            "the largest attention logit and the attention entropy per layer (gradoc reads "
            "them every 10 steps): alert when a layer's entropy falls under a tenth of uniform"
        )
        return [lr]


def lead_over_the_loss(f: Finding) -> Evidence | None:
    """The lead a precursor gave over the loss's harm it preceded (the first of its related
    loss findings after it), as evidence; None when none followed."""
    later = [
        r
        for r in f.related
        if r.kind in _LOSS_KINDS and r.step is not None and f.step is not None and r.step > f.step
    ]
    if not later or f.step is None:
        return None
    first = min(later, key=lambda r: r.step or 0)
    assert first.step is not None
    steps = first.step - f.step
    return Evidence(
        f"lead over the {first.kind} at step {first.step}",
        f"{steps} steps ({fmt(100 * steps / first.step)}% of the steps before it)",
    )
