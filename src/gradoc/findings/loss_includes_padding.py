"""loss_includes_padding: the loss is computed at padded positions as well.

Needs: ``gradoc run --check padding`` / ``watch(check_padding=True)``: the padding audit
(``locate/padding.py``) runs the model on a batch twice, the second time with only the
padded positions changed, and records what it finds as ``padding_audit`` events.

Rule: each audit finding is reported once (per layer), at the first step it was seen. The
audit takes the gradient of the loss (the program's loss function, or the loss the model
computes from ``labels=``) with respect to the model's per-position outputs: any non-zero
gradient at a padded position means the loss counts it.

Seen in the inputs, by default and at no cost (``meta['lengths']``, ``collect/probes/lengths.py``):
a Hugging Face style call ``model(input_ids, attention_mask=..., labels=...)`` whose labels
score padded positions (they are not -100 there). The pads are those the mask gives, else
the model's pad token; the first 3 batches are read with the step statistics. A share of
the scored positions at or above ``SCORED`` (1%) is a warning: the loss learns to predict
pads, and the loss reported falls for that alone (a GPT-2 whose labels are the padded
``input_ids``: 71% of the positions scored were pads, its loss 0.65 against 2.21).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, Weight
from ..detect.history import History
from ..detect.signals import audited, fmt
from .facts import Facts
from .kind import Details, FindingKind


@dataclass(slots=True)
class PaddingScored(Details):
    """Whether the model computed the loss itself, from ``labels=`` (Hugging Face)."""

    model_loss: bool = False
    scored_pads: float | None = None
    """Seen in the inputs: the share of the positions the labels score that are pads."""


SCORED = 0.01


class LossIncludesPadding(FindingKind):
    """The loss is computed at padded positions as well."""

    name = "loss_includes_padding"
    harm = (
        "The mechanism itself: the loss takes a gradient at padded positions (the audit), or at "
        "least 1% of the positions the labels score are pads."
    )

    def check(self, h: History) -> list[Finding]:
        return audited(h, self.name) or _in_the_inputs(h)

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        f.symptom = "the loss is computed at padded positions as well"
        cause = Hypothesis(
            Family.MASKING,
            "the loss has no ignore_index (or loss mask) for padded targets",
            "set padded targets to -100 (nn.CrossEntropyLoss's ignore_index) or multiply the "
            "per-position loss by the mask before averaging",
            base=0.3,
        )
        d = PaddingScored.of(f.details)
        if d.scored_pads is not None:
            cause.cause = "the labels score the padded positions: they are not -100 there"
            cause.seen(
                f"{d.scored_pads:.0%} of the positions the labels score are pads",
                Weight.DECISIVE,
            )
        else:
            cause.seen("the loss changed when only the padded targets changed", Weight.DECISIVE)
        if d.model_loss:  # the model computed it from labels= (HF)
            action = (
                "set the labels to -100 at padded positions, which the model's loss ignores: "
                "labels = input_ids.masked_fill(attention_mask == 0, -100)"
            )
        else:
            action = (
                "F.cross_entropy(logits, targets, ignore_index=PAD) with padded targets set to "
                "PAD, or (loss * mask).sum() / mask.sum()"
            )
        f.fixes.append(Fix(Horizon.IMMEDIATE, action))
        return [cause]


def _in_the_inputs(h: History) -> list[Finding]:
    lengths = h.meta.lengths or {}
    scored, on_pads = lengths.get("labels_scored") or 0, lengths.get("labels_on_pads") or 0
    if not scored or on_pads / scored < SCORED:
        return []
    share = on_pads / scored
    return [
        Finding(
            kind="loss_includes_padding",
            severity="warning",
            step=0,
            layer=None,
            summary=(
                f"the loss includes padding, seen in the inputs: {share:.0%} of the positions "
                "the labels score are pads (their label is not -100)"
            ),
            evidence=[
                Evidence("share of the scored positions that are pads", fmt(share)),
                Evidence("positions scored in the batches read", int(scored)),
            ],
            details=PaddingScored(model_loss=True, scored_pads=share),
        )
    ]
