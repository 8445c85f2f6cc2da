"""log_incomplete: the run log stopped recording before the run ended (a full disk). Not a
training problem: its fixes come with it (``report/json.py``); nothing to weigh."""

from __future__ import annotations

from ..detect.finding import Finding, Hypothesis, Kind
from ..detect.history import History
from .facts import Facts

KIND = Kind.LOG_INCOMPLETE
CAUSED_BY: tuple[Kind, ...] = ()
CONSIDERS_ZERO_INIT = False


def explain(f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
    return []
