"""critic_unconstrained: a Wasserstein critic with nothing that bounds its slope.

Needs: a run with a generator and a discriminator (``detect.training``) whose loss is the
mean of the discriminator's raw outputs (``collect.graph.mechanics``: no log, no sigmoid, a
Wasserstein critic), the gradient penalties the program made and whether a ``backward()``
reached them (``meta['penalties']``, ``collect.graph.mechanics.Penalties``), the parameters' names
and the critic's per-parameter gradient norms.

A Wasserstein critic estimates a distance only while it is 1-Lipschitz: a gradient penalty
(``autograd.grad(..., create_graph=True)`` in its loss), spectral normalisation or weight
clipping keeps it so. Without any, its loss has no minimum: it sharpens without bound, its
gradients grow, and the generator follows a gradient that says nothing of the data.

Rule: the critic's loss reads as raw scores and shows no gradient penalty in its graph, and
none of its parameters is spectrally normalised (``weight_orig``, ``parametrizations``);
and either

- a gradient penalty the program made in the critic's step was never reached by any
  ``backward()`` (its ``backward()`` commented out, or the penalty left out of the sum): seen
  directly, an **error**, with the line that made it; or
- the critic's gradient norm (its parameters', together) grew at least ``GROWTH`` (4x) from
  its first tenth to its last (medians): a **warning**. A critic held by weight clipping
  cannot grow so (its weights are bounded); our WGAN-GP on eight Gaussians
  (``tests/training/wgan_gp.py``), penalty dropped, went from 1.9 to 10.5 (5.5x) in 1,250
  critic steps, where the healthy run went from 2.0 to 1.4.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ..detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, Weight
from ..detect.history import History
from ..detect.signals import fmt
from ..detect.training import Objective
from .adversarial_imbalance import pairs
from .facts import Facts
from .game_stopped import objective_gradient
from .kind import Details, FindingKind

GROWTH = 4.0
SPECTRAL = ("weight_orig", "parametrizations.")
"""A parameter name that says its layer is spectrally normalised (``spectral_norm``'s old
and new spellings)."""


@dataclass(slots=True)
class Unconstrained(Details):
    """Where the dropped penalty was made (``file:line``), and the critic's gradient growth."""

    made_at: str = ""
    code: str = ""
    growth: float = 0.0


def _loss_fn(h: History, o: Objective) -> dict[str, object]:
    said = next((x for x in h.meta.objectives if x.get("id") == o.id), {})
    fn = said.get("loss_fn")
    return fn if isinstance(fn, dict) else {}


def _growth(h: History, o: Objective) -> float:
    """The critic's gradient norm, median of its last tenth over its first's."""
    _, norms = objective_gradient(h, o)
    norms = [v for v in norms if math.isfinite(v)]
    if len(norms) < 20:
        return 0.0
    k = len(norms) // 10
    start = statistics.median(norms[:k])
    return statistics.median(norms[-k:]) / start if start > 0 else 0.0


class CriticUnconstrained(FindingKind):
    """A Wasserstein critic with nothing that bounds its slope: no gradient penalty reaches
    its backward(), no spectral norm; its loss has no minimum."""

    name = "critic_unconstrained"
    harm = (
        "The mechanism itself: a gradient penalty made and never backpropagated (an error); or "
        "no constraint at all and the critic's gradient norm grew 4x or more (a warning)."
    )
    link = 25
    example_details = Unconstrained(
        made_at="wgan.py:37", code="grads = autograd.grad(out, x, create_graph=True)[0]", growth=6.6
    )

    def check(self, h: History) -> list[Finding]:
        found = []
        unbacked = (h.meta.penalties or {}).get("unbacked")
        for _g, d in pairs(h):
            fn = _loss_fn(h, d)
            if not fn.get("raw_scores") or fn.get("gradient_penalty"):
                continue
            names = [p.name for p in h.params if p.optimizer in d.optimizers]
            if any(s in n for n in names for s in SPECTRAL):
                continue
            growth = _growth(h, d)
            dropped = isinstance(unbacked, dict) and unbacked.get("objective") == d.id
            if not dropped and growth < GROWTH:
                continue
            details = Unconstrained(growth=growth)
            evidence = [Evidence(f"{d.name}'s loss", "the mean of its raw outputs (a critic)")]
            if dropped and isinstance(unbacked, dict):
                details.made_at = f"{unbacked.get('file')}:{unbacked.get('line')}"
                details.code = str(unbacked.get("code") or "")
                evidence.append(
                    Evidence(
                        "a gradient penalty made, never backpropagated",
                        f"{details.made_at}: {details.code}",
                    )
                )
                said = (
                    f"the gradient penalty made at {details.made_at} never reaches backward(), "
                    "so nothing bounds its slope"
                )
            else:
                said = "no gradient penalty in its loss, no spectral norm: nothing bounds its slope"
            if growth:
                evidence.append(
                    Evidence(f"{d.name}'s gradient norm, last tenth over first", fmt(growth))
                )
            found.append(
                self.found(
                    severity="error" if dropped else "warning",
                    step=None,
                    objective=d.name,
                    summary=(
                        f"{d.name} is a Wasserstein critic with no constraint: {said}"
                        + (f" (its gradient norm grew {fmt(growth)}x)" if growth >= 1.5 else "")
                    ),
                    evidence=evidence,
                    details=details,
                )
            )
        return found

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        d = Unconstrained.of(f.details)
        pair = next(((g, c) for g, c in pairs(h) if c.name == f.objective), None)
        g_name, d_name = (pair[0].name, pair[1].name) if pair else ("the generator", "the critic")
        f.symptom = (
            f"{d_name} scores samples with raw outputs and nothing keeps it 1-Lipschitz: its "
            f"estimate of the distance is unbounded and {g_name} follows a gradient that says "
            "nothing of the data"
        )
        dropped = Hypothesis(
            Family.LOOP,
            f"the gradient penalty is computed but not handed to backward() with {d_name}'s "
            "loss (its backward() removed, or the penalty left out of the sum)",
            "check that the penalty's tensor is in the loss that reaches backward()",
            base=0.2,
        )
        none = Hypothesis(
            Family.ARCHITECTURE,
            f"{d_name} is a Wasserstein critic written with no constraint: no gradient "
            "penalty, no spectral norm, no weight clipping",
            f"add a gradient penalty to {d_name}'s loss",
            base=0.2,
        )
        if d.made_at:
            dropped.seen(f"a penalty made at {d.made_at} that no backward() reached", Weight.STRONG)
            none.against(f"the program makes a penalty at {d.made_at}", Weight.STRONG)
        else:
            dropped.against("the program made no gradient penalty", Weight.STRONG)
            none.seen(
                f"{d_name}'s gradient norm grew {fmt(d.growth)}x over the run", Weight.MODERATE
            )
        fix = (
            f"hand the penalty made at {d.made_at} to backward() with {d_name}'s loss "
            "(gp.backward(), or loss_d = d_fake - d_real + lambda * gp)"
            if d.made_at
            else f"add a gradient penalty to {d_name}'s loss (WGAN-GP: lambda * "
            "((grad.norm(2, dim=1) - 1) ** 2).mean(), the gradient from autograd.grad("
            "..., create_graph=True) at samples between real and fake)"
        )
        f.fixes += [
            Fix(Horizon.IMMEDIATE, fix),
            Fix(
                Horizon.SHORT_TERM,
                f"spectral normalisation on {d_name}'s layers "
                "(torch.nn.utils.parametrizations.spectral_norm) as a second bound",
            ),
            Fix(
                Horizon.LONG_TERM,
                "log the penalty and the critic's gradient norm at the input: a critic kept "
                "1-Lipschitz holds that norm near 1",
            ),
        ]
        f.monitoring += [
            f"{d_name}'s gradient penalty term per step",
            f"{d_name}'s gradient norm with respect to its input",
        ]
        return [dropped, none]
