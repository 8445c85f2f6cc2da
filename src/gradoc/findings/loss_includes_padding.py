"""loss_includes_padding: the loss is computed at padded positions as well.

Needs: ``gradoc run --check padding`` / ``watch(check_padding=True)``: the padding audit
(``locate/padding.py``) runs the model on a batch twice, the second time with only the
padded positions changed, and records what it finds as ``padding_audit`` events.

Rule: each audit finding is reported once (per layer), at the first step it was seen. The
audit takes the gradient of the loss (the program's loss function, or the loss the model
computes from ``labels=``) with respect to the model's per-position outputs: any non-zero
gradient at a padded position means the loss counts it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..detect.finding import Family, Finding, Fix, Horizon, Hypothesis, Weight
from ..detect.history import History
from ..detect.signals import audited
from .facts import Facts
from .kind import Details, FindingKind


@dataclass(slots=True)
class PaddingScored(Details):
    """Whether the model computed the loss itself, from ``labels=`` (Hugging Face)."""

    model_loss: bool = False


class LossIncludesPadding(FindingKind):
    """The loss is computed at padded positions as well."""

    name = "loss_includes_padding"

    def check(self, h: History) -> list[Finding]:
        return audited(h, self.name)

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        f.symptom = "the loss is computed at padded positions as well"
        cause = Hypothesis(
            Family.MASKING,
            "the loss has no ignore_index (or loss mask) for padded targets",
            "set padded targets to -100 (nn.CrossEntropyLoss's ignore_index) or multiply the "
            "per-position loss by the mask before averaging",
            base=0.3,
        )
        cause.seen("the loss changed when only the padded targets changed", Weight.DECISIVE)
        if PaddingScored.of(f.details).model_loss:  # the model computed it from labels= (HF)
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
