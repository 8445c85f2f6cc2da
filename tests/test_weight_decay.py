"""weight_decay_dominates: a decay whose pull outweighs the gradient, read from the update."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from gradoc.detect.finding import Finding
from gradoc.detect.history import synthetic
from gradoc.findings import REGISTRY
from gradoc.fix.patch import edit_for
from gradoc.store import Series
from gradoc.store.meta import RunMeta

N = 400


def _history(optimizer: dict[str, Any], update: float, lr: list[float] | None = None) -> Any:
    """Three weight matrices of norm 5 whose updates have norm ``update`` at every step, under
    ``optimizer``."""
    names = [f"{i}.weight" for i in range(3)]
    h = synthetic(
        loss=[2.3 - 0.003 * i for i in range(N)],
        grad_norms={n: [0.5] * N for n in names},
        param_stats={n: {"weight_norm": [5.0] * N, "update_norm": [update] * N} for n in names},
        shapes={n: (64, 64) for n in names},
    )
    rates = lr or [optimizer["lr"]] * N
    return dataclasses.replace(
        h, lr=Series(list(range(N)), rates), meta=RunMeta(optimizers=[optimizer]), derived={}
    )


ADAMW = {"type": "AdamW", "groups": 1, "lr": 1e-3, "weight_decay": 10.0}


def test_a_decay_that_outweighs_the_update_is_a_warning_with_the_factor_that_fixes_it() -> None:
    # the decay's pull: 1e-3 * 10 * 5 = 0.05 against an update of norm 0.02: 2.5x
    (found,) = REGISTRY["weight_decay_dominates"].check(_history(ADAMW, update=0.02))
    d = found.details.to_json()
    assert found.severity == "warning" and d["share"] == pytest.approx(2.5)
    assert d["matrices"] == d["total"] == 3 and d["factor"] == 0.01  # 10 -> 0.1: D near 0.025


@pytest.mark.parametrize(
    ("optimizer", "update", "lr"),
    [
        ({**ADAMW, "weight_decay": 0.01}, 2e-5, None),  # a usual setting, whatever its share
        (ADAMW, 1.0, None),  # the gradient moves the weights: the decay is 5% of the update
        ({**ADAMW, "type": "Adam"}, 0.02, None),  # added to the gradient: not measured
        (ADAMW, 0.02, [1e-3] * 200 + [1e-5] * 200),  # a schedule lowered the decay with the rate
    ],
)
def test_no_warning_where_the_decay_does_not_outweigh_the_gradient(
    optimizer: dict[str, Any], update: float, lr: list[float] | None
) -> None:
    assert REGISTRY["weight_decay_dominates"].check(_history(optimizer, update, lr)) == []


@pytest.mark.parametrize(
    ("line", "after"),
    [
        (
            "opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=10.0)",
            "opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)",
        ),
        (
            "opt = AdamW(ps, lr=args.lr, weight_decay=args.wd)",
            "opt = AdamW(ps, lr=args.lr, weight_decay=args.wd * 0.01)",
        ),
        ("opt = AdamW(groups, lr=1e-3)", None),  # the decay is in the groups
    ],
)
def test_the_decay_is_scaled_where_the_optimizer_is_made(
    tmp_path: Path, line: str, after: str | None
) -> None:
    path = tmp_path / "train.py"
    path.write_text(line + "\n")
    at = {"file": str(path), "line": 1, "code": line}
    finding = Finding(
        kind="weight_decay_dominates",
        severity="warning",
        step=200,
        layer=None,
        summary="",
        details={"factor": 0.01},
    )
    edit = edit_for([finding], RunMeta(optimizers=[{"type": "AdamW", "at": at}]))
    assert (list(edit.after) if edit else None) == ([after] if after else None)
