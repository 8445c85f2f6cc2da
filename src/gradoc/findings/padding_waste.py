"""padding_waste: much of the compute goes to padded positions.

Needs: ``meta['lengths']``, recorded whenever the model's batch lengths can be read
(``collect/probes/lengths.py``).

Rule: info when more than ``WASTE_INFO`` (a third) of the tokens the model processed were
padding (above half it suggests bucketing): a cost, not a fault. When the pads were found
by the model's ``padding_idx`` with no mask argument, it says so and how to audit them.
"""

from __future__ import annotations

from ..detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, Weight
from ..detect.history import History
from ..detect.signals import fmt
from .facts import Facts
from .kind import FindingKind

WASTE_INFO = 1 / 3
_UNMASKED = (
    "; the pads reached the model with no mask argument (found by its embedding's "
    "padding_idx): unless the model masks them itself they change the real positions' "
    "outputs, which gradoc run --check padding audits"
)


class PaddingWaste(FindingKind):
    """Much of the compute goes to padded positions."""

    name = "padding_waste"
    harm = "None: a cost, never more than information."

    def check(self, h: History) -> list[Finding]:
        lengths = h.meta.lengths or {}
        ratio = lengths.get("padding_ratio")
        if ratio is None or ratio <= WASTE_INFO:
            return []
        return [
            self.found(
                severity="info",
                step=None,
                summary=f"{ratio:.0%} of the tokens were padding over {lengths['batches']} "
                f"batches (mean length {fmt(lengths['mean'])} of up to {lengths['max']})"
                + ("; bucket batches by length" if ratio > 0.5 else "")
                + (_UNMASKED if lengths.get("unmasked") else ""),
                evidence=[
                    Evidence("padding ratio", ratio),
                    Evidence("mean length", lengths["mean"]),
                    Evidence("lengths from", lengths.get("source")),
                ],
            )
        ]

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        f.symptom = "much of the compute goes to padded positions"
        random = Hypothesis(
            Family.BATCHING,
            "random batching of heavy-tailed lengths",
            "plot the lengths per batch",
            base=0.3,
        )
        random.seen(f.summary, Weight.MODERATE)
        f.fixes.append(
            Fix(
                Horizon.SHORT_TERM,
                "batch by length: DataLoader(dataset, batch_sampler=gradoc.data.LengthBucketSampler"
                "(lengths, batch_size=B)), or TokenBudgetBatchSampler for a budget of tokens a "
                "batch "
                "(help(gradoc.data))",
            )
        )
        return [random]
