"""adam_epsilon: the gradients are below Adam's epsilon, and its step shrinks with them.

Needs: the optimizer's setting (``meta['optimizers']``: its type and ``eps``), the learning rate
per step, the weight matrices' gradient and update norms (params schedule), and where it was
read, the optimizer's state at the end of the run (``meta['adam_state']``).

Adam's step is ``lr * m / (sqrt(v) + eps)``: where the gradient's RMS (``sqrt(v)``) is far
above ``eps`` the step is about ``lr`` per element whatever the gradient's scale; where it
falls near or below ``eps``, the step becomes ``lr * m / eps`` and shrinks with the gradient.
Wortsman et al. (2023, "Small-scale proxies for large-scale Transformer training
instabilities") show the gradient's RMS falling toward the default 1e-8 as models grow, the
update shrinking with it, and a smaller epsilon (1e-15) curing it. The same happens at any
size to a loss scaled far down (divided by the tokens twice, a loss scale never undone). In
the language model of ``benchmarks/precursors/lm.py`` (AdamW, betas 0.9, 0.95, lr 3e-3) the
update's RMS over the learning rate (``Δw_rms / lr``) was 0.19-0.25 on every weight matrix;
with the loss scaled by 1e-7 the gradients' RMS fell to 2e-11-4e-10, under eps 1e-8, and the
ratio to 0.001-0.02: a step 10-200x smaller than the learning rate asks for, on a run gradoc
reported healthy before this rule. With eps 1e-15 the same gradients gave 0.19-0.25 again.

Rule: an Adam-family optimizer (Adam, AdamW, NAdam, RAdam) with its ``eps`` recorded, and on
at least half of the weight matrices, over the run's second half (at least ``MIN_SAMPLES``
sampled steps), the median gradient RMS at most ``eps`` (and above 0: a gradient of 0 moves
no weight whatever eps is) and the median update RMS at most ``DAMPED`` (0.05) of the
learning rate. Where the optimizer's state was read at the end of the run
(``collect.probes.adam_state``), the damped matrices' second moments confirm it: the median share
of their elements whose bias-corrected ``sqrt(v)`` is at most eps at least ``STATE_SHARE``
(0.5); the gradient norms are the proxy on the sampled steps, the state the truth at one.
The update's ratio at the first samples is its own history: where it was far larger (3x),
the gradients fell under eps as the run went on (Wortsman et al.'s case), and that supports
the diagnosis; a loss scaled down from the start shows the same ratio throughout.

Harm: the mechanism itself: on half the weight matrices Adam's step is under 5% of its
learning rate because their gradients are below its epsilon. A warning.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ..detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, RuledOut, Weight
from ..detect.history import History
from ..detect.signals import SQRT_V_EPS, fmt, optimizer_type, second_half, weight_params
from .facts import Facts
from .kind import Details, FindingKind

DAMPED = 0.05
MIN_SAMPLES = 3
STATE_SHARE = 0.5
"""Where the optimizer's state was read at the end, at least this share of the damped
matrices' elements (their median) must have ``sqrt(v_hat)`` at most eps."""
SMALL_EPS = 1e-15
"""The epsilon Wortsman et al. found to keep the step at its learning rate."""


@dataclass(slots=True)
class Damped(Details):
    """The optimizer's epsilon, the gradients' and the steps' scale, and how many layers."""

    eps: float
    grad_rms: float
    """The median over the damped weight matrices of their median gradient RMS."""
    step_ratio: float
    """... and of their update RMS over the learning rate."""
    matrices: int
    total: int
    early_ratio: float | None = None
    """The damped matrices' update RMS over the learning rate at their first samples."""
    state_share: float | None = None
    """The median over the damped matrices of the share of their elements whose
    bias-corrected ``sqrt(v)`` was at most eps in the optimizer's state at the end of the run
    (``meta['adam_state']``); None where it was not read."""


def _state_share(h: History, damped: dict[str, tuple[float, float, float]]) -> float | None:
    """The median share of the damped matrices' elements whose ``sqrt(v_hat)`` was at most
    eps in the optimizer's state at the end (``collect.probes.adam_state``); None where not read."""
    read = (h.meta.adam_state or {}).get("eps_share")
    if not isinstance(read, dict):
        return None
    shares = [float(read[n]) for n in damped if isinstance(read.get(n), (int, float))]
    return statistics.median(shares) if shares else None


def _layers(h: History) -> dict[str, tuple[float, float, float]]:
    """Per weight matrix, over the run's second half (its last ``MIN_SAMPLES`` sampled steps
    where the cadence left fewer there): the median gradient RMS and the median update RMS
    over the learning rate at its step; and that ratio's median over its first
    ``MIN_SAMPLES`` samples (its own history: the same from the start, or shrunk since)."""
    lr_at = dict(zip(h.lr.steps, h.lr.values))
    out = {}
    for p in weight_params(h):
        numel = p.numel or (math.prod(p.shape) if p.shape else 0)
        if not numel:
            continue
        root = math.sqrt(numel)
        g, u = h.param(p.name, "grad_norm"), h.param(p.name, "update_norm")
        grads = dict(zip(g.steps, g.values))
        found = []
        for s, du in zip(u.steps, u.values):
            lr, gn = lr_at.get(s), grads.get(s)
            if s == 0 or not lr or gn is None or not math.isfinite(du) or not math.isfinite(gn):
                continue
            found.append((s, gn / root, du / root / lr))
        late = second_half(h, found, MIN_SAMPLES)
        if late is not None:
            out[p.name] = (
                statistics.median(x[1] for x in late),
                statistics.median(x[2] for x in late),
                statistics.median(x[2] for x in found[:MIN_SAMPLES]),
            )
    return out


class AdamEpsilon(FindingKind):
    """The gradients are below Adam's epsilon: its step shrinks with them."""

    name = "adam_epsilon"
    setup = True
    link = -1  # a setting of the optimizer: the first link of the slow training it causes
    harm = (
        "The mechanism itself: on at least half the weight matrices Adam's step is under 5% of "
        "its learning rate, their gradients' RMS below its epsilon."
    )
    example_details = Damped(eps=1e-8, grad_rms=4e-11, step_ratio=0.003, matrices=10, total=11)

    def check(self, h: History) -> list[Finding]:
        first = (h.meta.optimizers or [{}])[0]
        eps = first.get("eps")
        if optimizer_type(h) not in SQRT_V_EPS or not isinstance(eps, (int, float)) or eps <= 0:
            return []
        layers = _layers(h)
        # a gradient of 0 moves no weight whatever eps is: not this mechanism
        damped = {n: v for n, v in layers.items() if 0 < v[0] <= eps and v[1] <= DAMPED}
        if not layers or len(damped) * 2 < len(layers):
            return []
        state = _state_share(h, damped)
        if state is not None and state < STATE_SHARE:  # the optimizer's own v says otherwise
            return []
        grad = statistics.median(v[0] for v in damped.values())
        ratio = statistics.median(v[1] for v in damped.values())
        early = statistics.median(v[2] for v in damped.values())
        d = Damped(float(eps), grad, ratio, len(damped), len(layers), early, state)
        half = (h.loss.steps[-1] if h.loss.steps else 0) // 2
        return [
            self.found(
                severity="warning",
                step=half,
                summary=(
                    f"Adam's step shrinks with the gradients: their RMS ({fmt(grad)}, median) "
                    f"is below its eps ({fmt(eps)}) on {len(damped)} of {len(layers)} weight "
                    f"matrices, and its update there is {fmt(ratio)} of the learning rate (a "
                    f"normalised step is about 0.2): m / (sqrt(v) + eps) is m / eps"
                ),
                evidence=[
                    Evidence("eps", fmt(eps), type="code"),
                    Evidence("gradient RMS, second half (median)", fmt(grad)),
                    Evidence("update RMS / learning rate, second half (median)", fmt(ratio)),
                    Evidence("update RMS / learning rate, first samples (median)", fmt(early)),
                    Evidence(
                        "weight matrices damped", f"{len(damped)} of {len(layers)}", step=half
                    ),
                    *(
                        [
                            Evidence(
                                "their elements with sqrt(v) <= eps at the end (median)", fmt(state)
                            )
                        ]
                        if state is not None
                        else []
                    ),
                ],
                details=d,
            )
        ]

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        d = Damped.of(f.details)
        f.symptom = (
            f"the optimizer steps {fmt(d.step_ratio)} of its learning rate: the gradients are "
            f"{fmt(d.eps / d.grad_rms)}x below its epsilon"
        )
        eps = Hypothesis(
            Family.NUMERICS,
            f"Adam's eps ({fmt(d.eps)}) above the gradients' scale: it divides the step",
            f"re-run with eps={SMALL_EPS:g}: the update's RMS should come near 0.2 of the "
            "learning rate",
            base=0.4,
        )
        eps.seen(f.summary, Weight.DECISIVE, step=f.step)
        if d.early_ratio is not None and d.early_ratio >= 3 * d.step_ratio:
            eps.seen(  # the gradients fell toward eps as the run went on (Wortsman et al.)
                f"the update's RMS fell from {fmt(d.early_ratio)} of the learning rate at the "
                f"first samples to {fmt(d.step_ratio)}: the gradients shrank under eps",
                Weight.MODERATE,
            )
        small = Hypothesis(
            Family.LOOP,
            "a loss scaled far down (divided twice by the batch or the tokens, a loss scale "
            "never undone): the gradients are that much smaller than the problem's",
            "print loss.item() and a layer's grad.norm() at one step: a loss of order 1 with "
            f"gradients near {fmt(d.grad_rms)} is scaled",
            base=0.2,
        )
        if d.grad_rms < 1e-3 * d.eps:
            small.seen(
                f"the gradients' RMS is {fmt(d.grad_rms)}, {fmt(d.eps / d.grad_rms)}x below eps",
                Weight.MODERATE,
            )
        f.ruled_out.append(
            RuledOut(
                "learning rate too low",
                f"raising it raises the step only in proportion; the step is {fmt(d.step_ratio)}"
                " of it because eps divides it, whatever the rate",
            )
        )
        f.fixes += [
            Fix(
                Horizon.IMMEDIATE,
                f"lower eps to {SMALL_EPS:g}: torch.optim.AdamW(params, lr=..., "
                f"eps={SMALL_EPS:g}) (Wortsman et al. 2023)",
            ),
            Fix(
                Horizon.SHORT_TERM,
                "check how the loss is scaled: a mean over the batch and the tokens, divided once",
            ),
        ]
        f.monitoring.append(
            "the update's RMS over the learning rate per layer: about 0.2 for Adam; far below, "
            "eps divides the step"
        )
        return [eps, small]
