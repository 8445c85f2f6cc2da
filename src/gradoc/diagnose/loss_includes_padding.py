"""loss_includes_padding: the loss is computed at padded positions as well."""

from __future__ import annotations

from ..detect.finding import DECISIVE, Family, Finding, Fix, Horizon, Hypothesis, Kind
from ..detect.history import History
from .facts import Facts

KIND = Kind.LOSS_INCLUDES_PADDING
CAUSED_BY: tuple[Kind, ...] = ()
CONSIDERS_ZERO_INIT = False


def explain(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = "the loss is computed at padded positions as well"
    cause = Hypothesis(
        Family.MASKING,
        "the loss has no ignore_index (or loss mask) for padded targets",
        "set padded targets to -100 (nn.CrossEntropyLoss's ignore_index) or multiply the "
        "per-position loss by the mask before averaging",
        base=0.3,
    )
    cause.seen("the loss changed when only the padded targets changed", DECISIVE)
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
    f.fixes.append(Fix(Horizon.IMMEDIATE, action))
    return [cause]
