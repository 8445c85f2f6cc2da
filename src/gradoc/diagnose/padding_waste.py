"""padding_waste: much of the compute goes to padded positions."""

from __future__ import annotations

from ..detect.finding import MODERATE, Family, Finding, Fix, Horizon, Hypothesis, Kind
from ..detect.history import History
from .facts import Facts

KIND = Kind.PADDING_WASTE
CAUSED_BY: tuple[Kind, ...] = ()
CONSIDERS_ZERO_INIT = False


def explain(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    f.symptom = "much of the compute goes to padded positions"
    random = Hypothesis(
        Family.BATCHING,
        "random batching of heavy-tailed lengths",
        "plot the lengths per batch",
        base=0.3,
    )
    random.seen(f.summary, MODERATE)
    f.fixes.append(
        Fix(
            Horizon.SHORT_TERM,
            "batch by length: DataLoader(dataset, batch_sampler=gradoc.data.LengthBucketSampler"
            "(lengths, batch_size=B)), or TokenBudgetBatchSampler for a budget of tokens a batch "
            "(help(gradoc.data))",
        )
    )
    return [random]
