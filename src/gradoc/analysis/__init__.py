"""analysis: a run log in, the typed :class:`Report` out.

:func:`analyze` reads the run's history, finds every kind's findings (``gradoc.findings``),
folds them into stories and explains them (``gradoc.diagnose``), and gathers the facts of
the run. The renderers, the sinks, ``gradoc fix``, ``gradoc diff`` and the distributed merge
take the :class:`Report` it returns; ``gradoc.report.json`` writes and reads report.json.
"""

from __future__ import annotations

import math

from .._util.json_types import JsonObject
from ..detect import History
from ..detect.finding import Finding
from ..detect.precision import advice
from ..detect.signals import clip_factors
from ..diagnose import diagnose
from ..findings import check_all
from ..findings.log_incomplete import LogIncomplete
from ..findings.loss_unread import unread_reasons
from ..guard import GuardSummary
from ..schedule import lean_reads
from ..store import EventKind, RunLog, RunMeta, Series, Stopped
from .report import (
    REPORT_SCHEMA,
    SERIOUS,
    AttentionSeries,
    Clipping,
    MeasureSeries,
    ObjectiveFacts,
    OutputLogitSeries,
    Ranks,
    Report,
    RunFacts,
    Segment,
    as_floats,
)


def analyze(run: RunLog, stopped: Stopped | None = None) -> Report:
    """The report of a run log.

    ``stopped``: the run log stopped recording before the run ended (a full disk), with
    what the run knew in memory then. The report then says what was not watched: it is
    never "healthy".
    """
    history = History.load(run)
    findings = diagnose(history, check_all(history))
    meta = run.meta
    if meta.sampling:
        dated(findings, meta.sampling)
    if stopped is not None:
        meta = meta.updated(status=stopped.status, exit_code=stopped.exit_code)
        findings.append(LogIncomplete().stopped(run.num_steps, stopped))
    problems = any(f.severity in SERIOUS for f in findings)
    unwatched = _not_watched(run) if run.num_steps == 0 else None
    ending = run.ending if stopped is None else None  # a log that never closed
    facts = RunFacts(
        script=meta.script,
        steps=run.num_steps,
        duration_s=meta.duration_s,
        torch=meta.torch,
        gradoc=meta.gradoc,
        status=ending.status if ending is not None else meta.status,
        ending=ending.sentence if ending is not None else None,
        segments=[Segment.from_json(x) for x in meta.segments] if len(meta.segments) > 1 else [],
        exit_code=meta.exit_code,
        guard=GuardSummary.from_json(meta.guard) if meta.guard else None,
        steps_counted_by=list(meta.steps_counted_by),
        loss_read=loss_read(meta),
        clipping=clipping(run),
        unwatched=_unwatched(meta),
        objectives=[
            ObjectiveFacts.from_json(o.to_json() | unread(o.id, history))
            for o in history.objectives
        ],
        sampling=sampling(meta, run.num_steps),
        attention=attention_series(history),
        output_logits=output_logit_series(history),
        metrics=measure_series(history),
    )
    return Report(
        status="problems" if problems else ("not_watched" if unwatched else "healthy"),
        run=facts,
        findings=findings,
        not_watched=unwatched,
        amp=advice(meta.amp) if meta.amp else None,
    )


SERIES_POINTS = 100
"""Points of a series report.json holds at most (evenly spaced over the reads)."""


def attention_series(history: History) -> list[AttentionSeries]:
    """Each attention layer's logit gap and entropy share at the steps they were read, at
    most :data:`SERIES_POINTS` of them: report.json's ``run.attention``."""
    out = []
    for a in history.attention:
        if (read := _read(a.gap, a.entropy)) is not None:
            steps, (gap, share) = read
            out.append(AttentionSeries(a.layer, steps, gap, share))
    return out


def output_logit_series(history: History) -> list[OutputLogitSeries]:
    """Each output layer's log Z, largest logit and spread at the steps they were read, at
    most :data:`SERIES_POINTS` of them: report.json's ``run.output_logits``."""
    read = ((o, _read(o.log_z, o.top, o.spread)) for o in history.output_logits)
    return [OutputLogitSeries(o.layer, o.dtype, r[0], *r[1]) for o, r in read if r is not None]


def _read(*columns: Series) -> tuple[list[int], list[list[float | None]]] | None:
    """A site's series read at the same steps (the first's): the steps kept (at most
    :data:`SERIES_POINTS`) and each series' values there, non-finite ones as None; None
    where none was read."""
    keep = _spaced(len(columns[0].steps))
    if not keep:
        return None
    return [columns[0].steps[i] for i in keep], [_finite_at(s, keep) for s in columns]


def measure_series(history: History) -> list[MeasureSeries]:
    """The program's own measures with their direction and values (at most
    :data:`SERIES_POINTS` of them): report.json's ``run.metrics``."""
    out = []
    for m in history.measures:
        s = m.series
        finite = [v for v in s.values if math.isfinite(v)]
        best = None
        if finite and m.direction is not None:
            best = max(finite) if m.direction == "up" else min(finite)
        keep = _spaced(len(s))
        out.append(
            MeasureSeries(
                m.name,
                m.source,
                m.direction,
                m.why,
                len(s),
                _finite(s.values[0]),
                _finite(s.values[-1]),
                best,
                [s.steps[i] for i in keep],
                _finite_at(s, keep),
            )
        )
    return out


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


def _spaced(n: int) -> list[int]:
    """Which of ``n`` reads a series keeps: all, or :data:`SERIES_POINTS` evenly spaced
    (the first and the last among them)."""
    if n <= SERIES_POINTS:
        return list(range(n))
    return sorted({round(i * (n - 1) / (SERIES_POINTS - 1)) for i in range(SERIES_POINTS)})


def _finite_at(s: Series, keep: list[int]) -> list[float | None]:
    return [s.values[i] if math.isfinite(s.values[i]) else None for i in keep]


def sampling(meta: RunMeta, steps: int) -> str | None:
    """When weights, updates, activations, attention and output logits were read, in one
    sentence (attention and output logits are read at the same ``backward()`` calls)."""
    said = _sampled(meta, steps)
    attention = (meta.attention or {}).get("read")
    outputs = (meta.output_logits or {}).get("read")
    read = attention if isinstance(attention, str) else outputs
    if isinstance(read, str):
        what = " and ".join(
            w for w, m in (("attention", attention), ("output logits", outputs)) if m
        )
        said = f"{said}; {what} on {read}" if said else f"{what} on {read}"
    return said


def _sampled(meta: RunMeta, steps: int) -> str | None:
    """When weights, updates and activations were read: the cadence chosen from the run's
    step time (``collect.step.cadence``; its choice only once the run of ``steps`` went past the
    step it applies from), else the schedules the run was given."""
    chosen = meta.sampling
    if chosen:
        said = f"weights, updates and activations every {chosen.get('before')} steps"
        start = chosen.get("from")
        if not isinstance(start, int) or steps <= start or chosen.get("every") is None:
            return said + _reads(chosen, None)
        said += f" to step {start}, then every {chosen.get('every')}"
        step, sampled = chosen.get("step_ms"), chosen.get("sampled_step_ms")
        if isinstance(step, (int, float)) and isinstance(sampled, (int, float)):
            said += (
                f" (chosen at step {chosen.get('chosen_at')}: a step took {step:.3g} ms, a "
                f"sampled one {sampled:.3g} ms; budget {100 * float(chosen.get('share', 0)):g}%"
                " of the training time)"
            )
        return said + _reads(chosen, start)
    config = meta.config or {}
    if "params" not in config:
        return None
    return f"weights and updates on {config['params']}, activations on {config.get('activations')}"


GRADIENT_ONSETS = frozenset({"exploding_gradients", "vanishing_gradients"})
"""The kinds whose step is the first read of the gradients' norms that shows the problem."""


def dated(findings: list[Finding], chosen: JsonObject) -> None:
    """A finding of :data:`GRADIENT_ONSETS` dated on a lean stretch (the gradients' norms read
    every ``grads_every`` steps from ``from``, and on the sampled steps): the problem may have
    begun just after the read before; its ``step_from`` and summary say so."""
    kg, start, k = chosen.get("grads_every"), chosen.get("from"), chosen.get("every")
    if not isinstance(kg, int) or kg <= 1 or not isinstance(start, int):
        return
    every = k if isinstance(k, int) else None
    for f in findings:
        if f.kind not in GRADIENT_ONSETS or f.step is None or f.step <= start:
            continue
        read = next(  # the read before it (``kg`` steps back at most)
            s for s in range(f.step - 1, f.step - kg - 1, -1) if lean_reads(s, start, kg, every)
        )
        if f.step - read > 1:
            f.step_from = read + 1
            f.summary += (
                f" (its gradients were read every {kg} steps there: it began between step "
                f"{read + 1} and step {f.step})"
            )


def _reads(chosen: JsonObject, start: int | None) -> str:
    """The per-step reads' cadence (``collect.step.cadence``), said after the sampled one;
    ``start``: the step it applies from, None in a run that never got there."""
    if "grads_every" not in chosen:
        return ""
    kg = chosen.get("grads_every")
    if start is None or kg == 1 or kg is None:
        return "; gradient norms every step"
    reads, allowed = chosen.get("reads_ms"), chosen.get("reads_budget_ms")
    why = (
        " (as asked)"
        if chosen.get("grads_asked")
        else f" (their reads took {reads:.3g} ms a step, over their budget of {allowed:.3g} ms)"
        if isinstance(reads, (int, float)) and isinstance(allowed, (int, float))
        else ""
    )
    return f"; gradient norms every step to step {start}, then every {kg}{why}; the loss every step"


def loss_read(meta: RunMeta) -> str | None:
    """How the run's loss was read, in one sentence (None before schema 4's logs)."""
    read = meta.loss_read
    if read is None:
        return None
    parts = ["the loss handed to backward()"]
    if read.get("returned"):
        parts[0] += f", computed and returned {read['returned']}"
    through = []
    if read.get("unscaled"):
        through.append(f"{read['unscaled']}'s loss scaling undone")
    division = meta.loss_division
    if division and division.get("by") is not None:
        by = f"{division['by']:g}"
        through.append(
            f"the division by {by} micro-batches (gradient accumulation) undone"
            if division.get("undone")
            else f"divided by {by} before backward() (kept: not the step's number of "
            "backward() calls)"
        )
    kind = read.get("kind") or {}
    if kind.get("fn") == "cross_entropy":
        what = f"a cross-entropy over {kind.get('classes', '?')} classes"
        if "ignore_index" in kind:
            what += f" (ignore_index {kind['ignore_index']})"
        if kind.get("label_smoothing"):
            what += ", label-smoothed"
        through.append(what)
    elif kind.get("fn"):
        through.append(str(kind["fn"]).replace("_", " "))
    elif kind.get("node"):
        through.append(f"autograd node {kind['node']}")
    if through:
        parts.append("read through: " + "; ".join(through))
    policy = read.get("policy") or {}
    if policy.get("actions"):
        parts.append(
            f"a categorical policy over {policy['actions']} actions seen in its graph (its "
            "entropy read at backward())"
        )
    return "; ".join(parts)


def clipping(run: RunLog) -> Clipping | None:
    """The program's own gradient clipping: its function and threshold, and how often it
    bit (the norm it measured above the threshold) with the median factor it scaled by."""
    said = run.meta.clipping
    if said is None:
        return None
    measured, limits = run.scalar("clip_norm"), run.scalar("clip_max")
    factors = [f for _, f in clip_factors(measured, limits, finite=True)]
    bit = [f for f in factors if f < 1.0]
    return Clipping(
        said.get("fn"),
        said.get("threshold"),
        len(factors),
        len(bit),
        sorted(bit)[len(bit) // 2] if bit else None,
        said.get("norm_type"),
    )


def unread(objective: int, history: History) -> JsonObject:
    """``{"loss_unread": why}`` for the first objective whose steps had no loss read."""
    why = unread_reasons(history) if objective == 0 else []
    return {"loss_unread": "; ".join(why)} if why else {}


def _unwatched(meta: RunMeta) -> list[str]:
    """What of a run gradoc could not see, though it watched the steps."""
    out = []
    if meta.compiled:
        out.append(
            "the outputs of the modules inside a torch.compile'd model (compiled code runs "
            "no per-module hook; gradoc watches the model's inputs, loss, gradients, "
            "weights and updates)"
        )
    return out


def _not_watched(run: RunLog) -> str:
    """Why a run has no step: it is never "healthy" (nothing was seen to be healthy)."""
    found = any(e.kind == EventKind.NONFINITE_ORIGIN for e in run.events)
    if found:  # the origin says where the NaN/Inf was born and how it was found
        checked = ""
    elif run.meta.check_numerics:
        checked = "; --check numerics checked every operation: none made a NaN/Inf"
    else:
        checked = (
            "; `gradoc run --check numerics SCRIPT` checks every operation of a program "
            "that does not train"
        )
    if not run.params:
        return (
            "the program made no training step: gradoc counts one at each optimizer.step(), "
            "or, with no torch.optim optimizer, at each backward() or torch.autograd.grad() "
            "call, and saw none" + checked
        )
    return "the run ended before its first step finished: nothing was recorded" + checked


__all__ = [
    "REPORT_SCHEMA",
    "AttentionSeries",
    "Clipping",
    "GuardSummary",
    "MeasureSeries",
    "ObjectiveFacts",
    "OutputLogitSeries",
    "Ranks",
    "Report",
    "RunFacts",
    "analyze",
    "as_floats",
    "clipping",
    "loss_read",
]
