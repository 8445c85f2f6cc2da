"""eval_mode: modules left in ``eval()`` while the optimizer trains them.

Needs: ``meta['setup']['in_eval']``, read at early steps by ``collect/probes/setup.py``: the modules
whose forward differs between training and evaluation (BatchNorm that tracks running
statistics, dropout with a non-zero rate) that were in eval() at every step read while the
optimizer stepped.

``model.eval()`` left on after a validation pass (or called once before the loop) turns
BatchNorm into a fixed affine map by its running statistics, which training then never
updates: a network whose BatchNorm has never counted a batch normalises by a mean of 0 and a
variance of 1, whatever its activations are (a CNN whose activations grow layer by layer
stalls with them, our ``tests/shapes/eval_left_on.py``). That is the mechanism seen directly:
a **warning** when a BatchNorm in eval() learnt next to nothing: its defaults still weigh
more than half its statistics (``fresh_norms``: never counted a batch, or put in eval() by a
preview after the first batches, as a GAN's loop that samples its generator does,
``tests/mechanisms/dcgan_preview_eval.py``).
BatchNorm frozen after it learnt statistics (fine-tuning a pretrained network with frozen
BN, a common recipe) and dropout switched off are **information**: nothing in them is
harm by itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, Weight
from ..detect.history import History
from .facts import Facts
from .kind import Details, FindingKind


@dataclass(slots=True)
class InEval(Details):
    """The modules left in eval() and how many BatchNorms had never counted a batch."""

    modules: int
    fresh_norms: int
    names: list[str]
    kinds: dict[str, int]


class EvalMode(FindingKind):
    """Modules that behave differently in training (BatchNorm, dropout) were left in eval()
    while the optimizer stepped."""

    name = "eval_mode"
    setup = True
    harm = (
        "The mechanism itself: a BatchNorm in eval() whose statistics are still mostly their "
        "defaults normalises by a mean of 0 and a variance of 1. Dropout off, or BatchNorm frozen "
        "after it learnt, is information."
    )
    link = -1  # a set-up before the first step: the first link of whatever began with it
    example_details = InEval(modules=4, fresh_norms=2, names=[], kinds={})

    def check(self, h: History) -> list[Finding]:
        seen = (h.meta.setup or {}).get("in_eval") or {}
        if not seen.get("modules"):
            return []
        d = InEval(seen["modules"], seen.get("fresh_norms", 0), seen["names"], seen["kinds"])
        kinds = ", ".join(f"{n} {k}" for k, n in d.kinds.items())
        return [
            self.found(
                severity="warning" if d.fresh_norms else "info",
                step=0,
                layer=d.names[0] if d.names else None,
                summary=(
                    f"modules left in eval() while the optimizer stepped: {d.modules} ({kinds})"
                    + (
                        f"; {d.fresh_norms} BatchNorm had learnt next to nothing (running "
                        "statistics still mostly a mean of 0 and a variance of 1)"
                        if d.fresh_norms
                        else ""
                    )
                ),
                evidence=[
                    Evidence("modules in eval() at every step read", d.modules),
                    Evidence(
                        "BatchNorm in eval() still mostly at its default statistics", d.fresh_norms
                    ),
                    Evidence("modules", ", ".join(d.names[:5]), type="code"),
                    Evidence("steps at which this was read", (h.meta.setup or {}).get("checks")),
                ],
                details=d,
            )
        ]

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        d = InEval.of(f.details)
        f.symptom = (
            "the model trains in evaluation mode: BatchNorm uses fixed running statistics "
            "instead of the batch's, dropout is off"
        )
        left = Hypothesis(
            Family.LOOP,
            "model.eval() left on during training (called for a validation pass, or once "
            "before the loop) with no model.train() after it",
            "print(model.training) right before loss.backward(): it should be True",
            base=0.3,
        )
        left.seen(
            f"{d.modules} modules ({', '.join(d.names[:3])}) had training=False at every step "
            "read while the optimizer stepped",
            Weight.DECISIVE,
        )
        if d.fresh_norms:
            left.seen(
                f"{d.fresh_norms} BatchNorm had counted too few batches for its running "
                "statistics to be more than half learnt: they are still mostly a mean of 0 and "
                "a variance of 1",
                Weight.STRONG,
            )
        f.fixes += [
            Fix(Horizon.IMMEDIATE, "call model.train() at the top of each training epoch"),
            Fix(
                Horizon.SHORT_TERM,
                "wrap evaluation in a helper that restores the mode it found "
                "(was = model.training; model.eval(); ...; model.train(was))",
            ),
            Fix(
                Horizon.LONG_TERM,
                "to freeze BatchNorm on purpose, freeze only the norm layers (m.eval() for each "
                "nn.BatchNorm*, their parameters requires_grad_(False)) after loading statistics "
                "learnt on data",
            ),
        ]
        f.monitoring.append("model.training at every optimizer step (log it with the loss)")
        return [left]
