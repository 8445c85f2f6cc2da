"""nonfinite: the loss or a gradient became NaN or Inf.

Needs: per-step loss, per-parameter gradient non-finite counts, and the run's
``nonfinite_loss`` event: a loss the program computed and read (``if not
torch.isfinite(loss): break``, ``print(loss.item())``) or its model returned, that never
became a step's loss (it did not reach ``backward()``, or the step never ended).
Rule: any NaN/Inf is an error; there is no threshold to calibrate (SageMaker Debugger
and AUTOTRAINER both treat a single non-finite value as a failure). The finding points
at the first step where either the loss or a gradient was non-finite. Among the
parameters with non-finite gradients at that step it names the one registered last:
backward runs from the output towards the input, so the last-registered parameter with
a non-finite gradient is the nearest to where backward first met the bad value (locating
the operation itself is the job of ``locate``).

Growth before: when, before that step, the loss rose ``GROWTH`` (100)x above the least of
its first 3 values or the global gradient norm ``GROWTH``x above its early median (first
10 steps), the finding's ``details["grew_before"]`` holds the ratios: the op that turned
the values non-finite only overflowed what was already blowing up (SGD at lr 50 on a
transformer: loss 1.45, then 4e8, then NaN in a LayerNorm; benchmarks/accuracy.py,
calibration split, transformer:lr_sgd), so it is a consequence, not a root cause.
"""

from __future__ import annotations

import math
from typing import Any

from .._util.text import module_label
from ..store import EventKind
from ._util import fmt
from .finding import Evidence, Finding, Kind
from .history import History

GROWTH = 100.0


def _grew_before(h: History, step: int) -> dict[str, float]:
    grew = {}
    loss = [(s, v) for s, v in zip(h.loss.steps, h.loss.values) if math.isfinite(v)]
    start = [v for _, v in loss[:3]]
    before = [v for s, v in loss if s < step]
    if start and before and min(start) > 0 and max(before) >= GROWTH * min(start):
        grew["loss"] = max(before) / min(start)
    norms = [(s, v) for s, v in zip(h.grad_norm.steps, h.grad_norm.values) if math.isfinite(v)]
    early = sorted(v for _, v in norms[:10])
    later = [v for s, v in norms if s < step]
    if early and later and early[len(early) // 2] > 0:
        ratio = max(later) / early[len(early) // 2]
        if ratio >= GROWTH:
            grew["grad_norm"] = ratio
    return grew


def check(h: History) -> list[Finding]:
    loss = h.loss
    bad_loss = loss.first_nonfinite()
    counts = h.grad_nonfinite
    bad_grad = next((s for s, v in zip(counts.steps, counts.values) if v), None)
    # a located origin is itself the evidence (a script may stop before backward)
    origins = [e.data["origin"] for e in h.events if e.kind == EventKind.NONFINITE_ORIGIN]
    first_origin = min((o["step"] for o in origins if o.get("step") is not None), default=None)
    unbacked = _unbacked(h)
    bad_unbacked = unbacked[0] if unbacked is not None else None
    if bad_loss is None and bad_grad is None and first_origin is None and bad_unbacked is None:
        return _printed(h)
    step = min(s for s in (bad_loss, bad_grad, first_origin, bad_unbacked) if s is not None)
    evidence: list[Evidence] = []
    layer = None
    parts = []
    if unbacked is not None and (bad_loss is None or unbacked[0] < bad_loss):
        at, shown, what = unbacked
        evidence.append(Evidence("loss, never a step's loss", shown, step=at))
        parts.append(f"loss became {shown} at step {at} ({what})")
    elif bad_loss is not None:
        at, shown = bad_loss, _fmt(loss.at(bad_loss))
        evidence.append(Evidence("loss", shown, step=at))
        parts.append(f"loss became {shown} at step {at}")
    if unbacked is not None or bad_loss is not None:
        before = [v for s, v in zip(loss.steps, loss.values) if s < at and math.isfinite(v)]
        if before:
            evidence.append(Evidence("last finite loss", before[-1]))
    if bad_grad is not None:
        with_grads = [
            p for p in h.params if h.param(p.name, "grad_nonfinite").at(bad_grad) is not None
        ]
        bad = [(p, h.param(p.name, "grad_nonfinite").at(bad_grad) or 0) for p in with_grads]
        bad = [(p, c) for p, c in bad if c]
        total = int(sum(c for _, c in bad))
        nearest = bad[-1][0] if bad else None  # params are in registration order
        layer = nearest.module if nearest else None
        evidence.append(Evidence("non-finite gradient values", total, step=bad_grad))
        evidence.append(
            Evidence(
                "parameters with non-finite gradients",
                len(bad),
                extra={"of": len(with_grads), "names": [p.name for p, _ in bad][-10:]},
            )
        )
        where = f" (nearest the loss: {nearest.name})" if nearest else ""
        parts.append(
            f"{len(bad)} of {len(with_grads)} parameters had non-finite gradients "
            f"at step {bad_grad}{where}"
        )
    # a later origin caught with tracing armed is more precise than the first replay's
    origin = next((o for o in reversed(origins) if o.get("file")), origins[0] if origins else None)
    if origin is not None:
        # the located birth is the story: its module is the layer, its step the start
        layer = origin.get("module") if origin.get("phase") != "input" else layer
        step = min(step, origin["step"]) if origin.get("step") is not None else step
        where = f" in {module_label(origin['module'])}" if "module" in origin else ""
        line = f" at {origin['file']}:{origin['line']}" if origin.get("file") else ""
        if origin.get("op"):
            parts.insert(0, f"born in the {origin['phase']} pass: {origin['op']}{where}{line}")
        elif origin["phase"] == "input":
            parts.insert(0, "born in the input data")
        elif origin.get("module") is None:
            parts.insert(0, f"born outside the model ({origin['phase']} pass)")
    skipped = h.meta.get("skipped_updates")
    if skipped:
        evidence.append(Evidence("non-finite updates not applied", skipped))
    grew = _grew_before(h, step)
    for what, ratio in grew.items():
        evidence.append(Evidence(f"{what.replace('_', ' ')} growth before", fmt(ratio)))
    return [
        Finding(
            kind=Kind.NONFINITE,
            severity="error",
            step=step,
            layer=layer,
            summary="; ".join(parts),
            evidence=evidence,
            origin=origin,
            details={"grew_before": grew} if grew else {},
        )
    ]


def _fmt(value: float | None) -> str:
    return "missing" if value is None else repr(value).lower()


def _unbacked(h: History) -> tuple[int, str, str] | None:
    """The run's first non-finite loss that was never a step's loss (see the module
    docstring): (step, value, how the program had it); None without one."""
    event = next(
        (e for e in h.events if e.kind == EventKind.NONFINITE_LOSS and "read_by" in e.data), None
    )
    if event is None or event.step is None:
        return None
    how = str(event.data["read_by"])
    what = how if event.data.get("backpropagated") else f"{how}, never backpropagated"
    return event.step, str(event.data.get("value", "nan")), what


def printed_at_the_end(meta: dict[str, Any]) -> int | None:
    """The step of a NaN/Inf the program printed within its last step (``loss nan`` from a
    detached loss, a metric gradoc does not watch) before it ended; None otherwise (a
    ``best = inf`` printed long before the end is not one)."""
    last, steps = meta.get("printed_nonfinite_last"), meta.get("steps")
    at = last.get("step") if isinstance(last, dict) else None
    if not isinstance(at, int) or not isinstance(steps, int) or steps == 0:
        return None
    return at if at >= steps - 1 else None


def _printed(h: History) -> list[Finding]:
    """A NaN/Inf the program printed just before it ended, in nothing gradoc watched: not
    healthy, and said plainly (``gradoc run`` re-runs the script to find it when it may)."""
    at = printed_at_the_end(h.meta)
    if at is None:
        return []
    text = str(h.meta["printed_nonfinite_last"].get("text", ""))[:160]
    return [
        Finding(
            kind=Kind.NONFINITE,
            severity="warning",
            step=at,
            layer=None,
            summary=(
                f"the program printed a non-finite value at step {at} and then ended "
                f"({text[:80]!r}), in something gradoc does not watch (a detached loss, a "
                "metric): the loss and gradients it watched were finite"
            ),
            evidence=[Evidence("printed", text, step=at)],
            details={"printed": text},
        )
    ]
