"""output_logit_divergence: the output logits' level drifted far from 0 in a dtype that
cannot resolve the loss there.

Needs: the output layers under the loss's log-softmax (``collect.graph.output_logits``: a
``cross_entropy`` or ``log_softmax`` over a linear layer's product), read on the first 20
steps, then one step in 10 (or fewer, within the budget): the rows' mean ``log Z`` (the
log-sum-exp of the logits), their mean largest logit and spread, and the dtype the layer
computed its logits in.

A softmax cross-entropy cannot see its logits' level: adding a constant to every logit of a
row changes no probability and no gradient, so nothing in the loss holds it. The logits
diverging from the log-probabilities is the second instability of large transformers that
Wortsman et al. (2023, "Small-scale proxies for large-scale Transformer training
instabilities") describe, after PaLM (Chowdhery et al. 2022), who held ``log Z`` near 0 with
a z-loss ``1e-4 * log(Z)^2``; Stollenwerk et al. (2026) trace the drift to the output
embeddings' shared direction. Its harm is the logits' arithmetic: t5x's z-loss keeps them
from drifting "too far from zero (which can cause unacceptable roundoff errors in
bfloat16)". A logit computed in a dtype of spacing ``s`` at its level is off by up to
``s / 2``; rounding errors of that size cost the loss about ``s^2 / 24`` nats on average
(half the variance of the errors under the softmax): 0.003 at a spacing of 0.25 (bfloat16
from 32), 0.01 at 0.5 (bfloat16 from 64), 0.04 at 1 (from 128), and more as the level goes
on drifting.

On the CPU proxy (``python benchmarks/precursors.py --drift``: ``precursors/lm.py`` on a
4,096-word vocabulary with an output bias, no weight decay, qk-layernorm, AdamW at 0.3,
12,000 steps) ``log Z`` fell from 8.5 through 0 to -52 at its farthest with the logits in
bfloat16 and to -48 in float32, while the loss went on falling (3.01 and 2.96 at the end); a
z-loss of 1e-4 slowed the drift (to -26) without stopping it. The loss showed no harm: at a
spacing of a quarter of a nat (bfloat16 from 32, which the run passed at step 8,170) the
rounding costs 0.003 nats, under the noise of a step. A first version of this rule warned
there, on a run that trains; the rule now waits for a spacing of half a nat (0.01 nats),
which none of the three reached. In float32 a level costs nothing short of ``2**22`` (a
spacing of half a nat), so a float32 drift is shown in the report's series and never found.

Rule: on one output layer computing its logits in bfloat16 or float16, ``log Z`` at least
``DRIFT`` (16 nats) further from 0 than at its first reads, where the dtype's spacing is at
least ``RESOLUTION`` (0.5 nats, 0.01 nats of loss: bfloat16 from 64, float16 from 512); the
same at the next read too (a trend, not one batch). Its step is the first of those reads.

Harm: a statistic beyond what a healthy run shows, with its source: logits whose dtype
rounds them to half a nat or coarser (about 0.01 nats of loss, growing with the level),
because the level drifted there during the run. A warning; when the loss then diverges or
blows up, this heads that story with the lead it gave; a level that rose with a loss
already blowing up is its consequence.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ..detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, RuledOut, Weight
from ..detect.history import History, OutputLogits
from ..detect.signals import fmt
from .advice import lr_fix
from .attention_logit_growth import lead_over_the_loss
from .facts import Facts
from .kind import Details, FindingKind

DRIFT = 16.0
RESOLUTION = 0.5
FIRST_READS = 3
MANTISSA = {"bfloat16": 7, "float16": 10}
"""Explicit mantissa bits of the dtypes the rule reads (float32's 23 never reach it)."""


def spacing(dtype: str, level: float) -> float:
    """The distance between neighbouring values of ``dtype`` at ``|level|`` (nats)."""
    bits = MANTISSA.get(dtype, 23)
    return 2.0 ** (math.floor(math.log2(max(abs(level), 1e-30))) - bits)


@dataclass(slots=True)
class Drift(Details):
    """The layer's dtype, its ``log Z`` at the first reads and at the finding's step, the
    spacing there, the farthest level it reached, and its largest logit then."""

    dtype: str
    start: float
    log_z: float
    resolution: float
    farthest: float
    top: float


def _drifted(o: OutputLogits) -> tuple[int, float] | None:
    """The first read where the rule holds at it and at the next read: (its index, start)."""
    if o.dtype not in MANTISSA:
        return None
    values = [(i, v) for i, v in enumerate(o.log_z.values) if math.isfinite(v)]
    if len(values) < FIRST_READS + 2:
        return None
    start = statistics.median(v for _, v in values[:FIRST_READS])

    def far(v: float) -> bool:
        return abs(v) >= abs(start) + DRIFT and spacing(o.dtype, v) >= RESOLUTION

    for (i, v), (_, w) in zip(values[FIRST_READS:], values[FIRST_READS + 1 :]):
        if far(v) and far(w) and (v > 0) == (w > 0):
            return i, start
    return None


class OutputLogitDivergence(FindingKind):
    """The output logits' level drifted from 0 to where their low-precision dtype rounds
    them to half a nat. Diagnosed as nothing holding the level (no z-loss, no weight decay,
    an output bias free under Adam), from the level's drift and the optimizer's settings."""

    name = "output_logit_divergence"
    caused_by = ("nonfinite", "loss_blowup", "loss_divergence", "exploding_gradients")
    """A level that rose as the loss blew up (one logit growing without bound) is the
    blow-up's consequence, not its precursor."""
    link = 12
    harm = (
        "A statistic beyond what a healthy run shows, with its source (PaLM's z-loss, "
        "Wortsman et al. 2023, t5x): the output logits' level drifted 16 nats or more from its "
        "start to where their bfloat16 or float16 spacing is 0.5 nats or more (about 0.01 "
        "nats of loss), at two reads in a row."
    )
    example_details = Drift(
        dtype="bfloat16", start=8.5, log_z=-70.0, resolution=0.5, farthest=-95.0, top=-71.0
    )

    def check(self, h: History) -> list[Finding]:
        found = [(r, o) for o in h.output_logits if (r := _drifted(o)) is not None]
        if not found:
            return []
        (i, start), o = min(found, key=lambda x: x[1].log_z.steps[x[0][0]])
        step, log_z = o.log_z.steps[i], o.log_z.values[i]
        farthest = max((v for v in o.log_z.values if math.isfinite(v)), key=abs)
        top = o.top.values[i] if i < len(o.top.values) else math.nan
        d = Drift(o.dtype, start, log_z, spacing(o.dtype, log_z), farthest, top)
        evidence = [
            Evidence("log Z at the first reads (median)", fmt(start)),
            Evidence(f"log Z at step {step}", fmt(log_z), step=step),
            Evidence("largest logit then (mean over the rows)", fmt(top), step=step),
            Evidence(f"{o.dtype} spacing at that level (nats)", fmt(d.resolution), step=step),
            Evidence("loss its rounding costs, about (nats)", fmt(d.resolution**2 / 24)),
            Evidence("log Z farthest from 0 in the run", fmt(farthest)),
        ]
        return [
            self.found(
                severity="warning",
                step=step,
                layer=o.layer,
                summary=(
                    f"the output logits of {o.layer} drifted: log Z went from {fmt(start)} to "
                    f"{fmt(log_z)} by step {step}, where {o.dtype} rounds them to "
                    f"{fmt(d.resolution)} nats (about {fmt(d.resolution**2 / 24)} nats of "
                    "loss, more as it drifts on): the drift that ends in output-logit "
                    "divergence at scale (Wortsman et al. 2023)"
                ),
                evidence=evidence,
                details=d,
            )
        ]

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        d = Drift.of(f.details)
        f.symptom = (
            f"the logits of {f.layer} sit at {fmt(d.log_z)} nats (log Z), {fmt(d.start)} at the "
            f"start: {d.dtype} spaces them {fmt(d.resolution)} nats apart there"
        )
        lead = lead_over_the_loss(f)
        if lead is not None:
            f.evidence.append(lead)
        free = Hypothesis(
            Family.ARCHITECTURE,
            "nothing holds the output logits' level: the softmax cannot see it, and no z-loss "
            "or weight decay pulls it back while the optimizer's steps move it",
            "re-run with a z-loss of 1e-4 * logsumexp(logits, -1).pow(2).mean() added to the "
            "loss: log Z should stay within a few nats of 0",
            base=0.4,
        )
        free.seen(f.summary, Weight.DECISIVE, step=f.step)
        if facts.lr is not None:
            free.seen(f"the learning rate was {fmt(facts.lr)} at the end", Weight.WEAK)
        f.ruled_out.append(
            RuledOut(
                "a bad batch",
                f"log Z stayed over {fmt(DRIFT)} nats beyond its start at two reads in a row, "
                f"and reached {fmt(d.farthest)}: a batch moves it once",
            )
        )
        f.fixes += [
            Fix(
                Horizon.IMMEDIATE,
                "add a z-loss to the loss: loss + 1e-4 * torch.logsumexp(logits.float(), -1)"
                ".pow(2).mean() (PaLM, Chowdhery et al. 2022)",
            ),
            Fix(
                Horizon.SHORT_TERM,
                "compute the output layer's logits in float32 (under autocast: "
                "with torch.autocast(device_type, enabled=False): logits = "
                "lm_head(x.float())), and apply weight decay to "
                "the output layer (Wortsman et al. 2023)",
            ),
            lr_fix(0.3, "lower the learning rate 3x", Horizon.SHORT_TERM),
            Fix(
                Horizon.LONG_TERM,
                "centre the output embeddings (subtract their mean after each step; "
                "Stollenwerk et al. 2026) or cap the logits (30 * tanh(logits / 30))",
            ),
        ]
        f.monitoring.append(
            "log Z of the output logits (gradoc reads it every 10 steps with the attention): "
            "alert when it moves 16 nats from its start, or rounds to half a nat, in a 16-bit "
            "dtype"
        )
        return [free]
