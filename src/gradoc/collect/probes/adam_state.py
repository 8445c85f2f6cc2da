"""Adam's second-moment estimates against its epsilon, read once, when the run closes.

Adam's step is ``lr * m_hat / (sqrt(v_hat) + eps)``: where an element's ``sqrt(v_hat)`` is
at or below ``eps`` its step is no longer about ``lr`` but ``lr * m_hat / eps``, shrinking
with the gradient (Wortsman et al. 2023). The optimizer's state holds ``v`` (``exp_avg_sq``,
or ``max_exp_avg_sq`` with AMSGrad) and its step count, so the share of each weight
matrix's elements in that regime is read from the state itself: for the first Adam-family
optimizer, on the device, one host read for all its matrices, at the end of the run (the
state then is the run's last; nothing is read while it trains). The optimizer's state is
only read.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from ..._util.json_types import JsonObject
from ...detect.signals import SQRT_V_EPS
from .grads import WatchedOptimizer


@torch.no_grad()
def eps_shares(targets: Iterable[WatchedOptimizer], step: int) -> JsonObject:
    """``meta['adam_state']``: the step it was read at, the optimizer's eps, and per weight
    matrix the share of its elements whose bias-corrected ``sqrt(v)`` is at most eps; empty
    where no Adam-family optimizer with a state trained."""
    target = next(
        (t for t in targets if not t.manual and type(t.optimizer).__name__ in SQRT_V_EPS), None
    )
    if target is None:
        return {}
    try:
        names, shares, eps = _shares(target)
    except (RuntimeError, TypeError, ValueError, KeyError):  # a state of another shape
        return {}
    if not names:
        return {}
    values = torch.stack(shares).tolist()  # the one host read
    return {
        "adam_state": {
            "step": step,
            "eps": eps,
            "eps_share": {n: round(float(v), 6) for n, v in zip(names, values)},
        }
    }


def _shares(target: WatchedOptimizer) -> tuple[list[str], list[torch.Tensor], float]:
    opt: Any = target.optimizer
    group_of = {id(p): g for g in opt.param_groups for p in g["params"]}
    names: list[str] = []
    shares: list[torch.Tensor] = []
    eps = float(opt.param_groups[0]["eps"])
    for w in target.params:
        p, group = w.param, group_of.get(id(w.param))
        state = opt.state.get(p)
        if group is None or not state or p.dim() < 2:
            continue
        v = state.get("max_exp_avg_sq", state.get("exp_avg_sq"))
        step = state.get("step")
        if not isinstance(v, torch.Tensor) or step is None or not v.numel():
            continue
        beta2 = float(group["betas"][1])
        t = step.to(v.device, torch.float32) if isinstance(step, torch.Tensor) else float(step)
        corrected = 1.0 - beta2**t  # v / corrected is v_hat
        limit = float(group["eps"]) ** 2 * corrected
        shares.append((v <= limit).float().mean())
        names.append(w.name)
    return names, shares, eps
