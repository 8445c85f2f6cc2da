"""report.html: one self-contained page (no script, no CDN) generated from the run log.

The diagnosis as in the terminal, with the origin's source lines in context, and the
charts: loss with event markers, global gradient norm, gradient flow per layer, a layer x
step heatmap of gradient norms, dead and saturated fractions per layer over time, and
update/weight ratios. Every string that comes from the user's code or run (module names,
messages, source lines) goes through ``html.escape`` or the SVG writer's XML escaping.
"""

from __future__ import annotations

import html
import itertools
import math
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._util.text import module_label, number
from ..analysis import Report, as_floats
from ..compare.diff import Difference, RunDiff
from ..detect.finding import Finding, Origin, Reading, State
from ..detect.signals import update_ratio_series
from ..findings.dead_units import dead_share, relu_family
from ..fix.compare import Comparison
from ..store import EventKind, RunLog
from . import charts
from .results import Plan

MAX_ROWS = 48
"""Layers shown in a heatmap (evenly chosen in network order when there are more)."""
MAX_COLS = 240
"""Steps shown in a heatmap (evenly chosen)."""
MAX_BARS = 64
"""Bars in the gradient-flow chart (consecutive layers share one when there are more)."""
MAX_LINES = 12
"""Layers drawn in the update/weight chart."""


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def _num(x: object) -> str:
    """Numbers as :func:`gradoc._util.text.number` writes them; anything else escaped."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return _e(x)
    return number(x)


def _bars(
    names: list[str], at: dict[int, tuple[list[float], list[float]]]
) -> tuple[list[str], dict[int, tuple[list[float], list[float]]]]:
    """At most ``MAX_BARS`` bars: consecutive layers together (median RMS, largest max;
    non-finite when any member is), so a wide model's chart stays readable and quick."""
    if len(names) <= MAX_BARS:
        return names, at
    edges = [round(i * len(names) / MAX_BARS) for i in range(MAX_BARS + 1)]
    spans = [(a, b) for a, b in itertools.pairwise(edges) if b > a]
    labels = [names[a] if b - a == 1 else f"{names[a]} … {names[b - 1]}" for a, b in spans]

    def pool(values: list[float], a: int, b: int, how: Any) -> float:
        part = values[a:b]
        bad = [v for v in part if not math.isfinite(v)]  # marked as one layer's would be
        return bad[0] if bad else float(how(part))

    out = {
        s: (
            [pool(rms, a, b, statistics.median) for a, b in spans],
            [pool(mx, a, b, max) for a, b in spans],
        )
        for s, (rms, mx) in at.items()
    }
    return labels, out


def _even(items: list[Any], n: int) -> list[Any]:
    if len(items) <= n:
        return items
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)]


# -- the diagnosis -----------------------------------------------------------------------------
def _source(origin: Origin) -> str:
    """The origin's line in context, as recorded when the run happened. Never read from
    ``origin.file``: a run log may come from anyone, and its ``file`` may name
    ``/etc/shadow`` or ``/dev/zero``."""
    file, line, source = origin.file, origin.line, origin.source
    if not file or not isinstance(line, int):
        return ""
    if source is None or not source.around(line):
        code = origin.code
        return (
            f'<pre class="src"><span class="hit">{line:>5}  {_e(code)}</span></pre>' if code else ""
        )
    rows = []
    for n, text in enumerate(source.lines, source.start):
        row = f"{n:>5}  {_e(text)}"
        rows.append(f'<span class="hit">{row}</span>' if n == line else row)
    return (
        f'<div class="file">{_e(file)}:{line}</div><pre class="src">' + "\n".join(rows) + "</pre>"
    )


def _origin(origin: Origin) -> str:
    where = origin.module
    parts = [
        f"<b>{_e(origin.phase)}</b>",
        f"<code>{_e(origin.op)}</code>" if origin.op else "",
        f"in <code>{_e(where)}</code>" if where else _e(f"in {module_label(where)}"),
    ]
    ev = _readings(origin.evidence)
    note = f"<p class='note'>{_e(origin.note)}</p>" if origin.note else ""
    return (
        f"<div class='origin'><h4>Where it was born</h4><p>{' '.join(p for p in parts if p)}</p>"
        f"{_source(origin)}{_why(origin)}<ul>{ev}</ul>{note}</div>"
    )


def _readings(readings: list[Reading]) -> str:
    return "".join(f"<li>{_e(e.signal)}: <b>{_num(e.value)}</b></li>" for e in readings)


def _why(origin: Origin) -> str:
    """The mechanism beside the located line: what happened there, in the run's numbers,
    and the stable idiom."""
    m = origin.mechanism
    if m is None:
        return ""
    ev = _readings(m.evidence)
    return (
        f"<div class='mechanism'><p><b>Why</b> ({_e(m.kind)}, <code>{_e(m.name)}</code>): "
        f"{_e(m.said)}</p><ul>{ev}</ul><p><b>Stable form</b>: {_e(m.idiom)}</p></div>"
    )


def _section(title: str, items: list[str], cls: str = "", tag: str = "ul") -> str:
    """A titled list of HTML fragments (already escaped); nothing when there are none."""
    if not items:
        return ""
    body = "".join(f"<li>{i}</li>" for i in items)
    return f"<h4>{title}</h4><{tag} class='{cls}'>{body}</{tag}>"


def _finding(f: Finding) -> str:
    at = f" at step {f.step}" if f.step is not None else ""
    layer = f" in <code>{_e(f.layer or '(model)')}</code>" if f.layer is not None else ""
    out = [
        f"<article class='finding {_e(f.severity)}'>",
        f"<h3><span class='sev'>{_e(f.severity)}</span> {_e(f.kind)}{at}{layer}</h3>",
        f"<p class='summary'>{_e(f.summary)}</p>",
    ]
    if f.symptom:
        out.append(f"<h4>Symptom</h4><p>{_e(f.symptom)}</p>")
    if f.origin is not None:
        out.append(_origin(f.origin))
    out.append(
        _section(
            "Signals",
            [
                f"{_e(e.signal)}: <b>{_num(e.value)}</b>"
                + (f" <span class='dim'>(step {e.step})</span>" if e.step is not None else "")
                for e in f.evidence
            ],
        )
    )
    out.append(_section("Related", [_e(r.summary) for r in f.related], "related"))
    hyps = []
    for h in f.hypotheses:
        sup = "".join(f"<li class='for'>{_e(s)}</li>" for s in h.claims(State.SEEN))
        ag = "".join(f"<li class='against'>{_e(s)}</li>" for s in h.claims(State.CONTRADICTED))
        check = f"<div class='check'>check: {_e(h.check)}</div>" if h.check else ""
        hyps.append(
            f"<span class='lk {_e(h.likelihood)}'>{_e(h.likelihood)}</span> "
            f"{_e(h.cause)}<ul>{sup}{ag}</ul>{check}"
        )
    out.append(_section("Hypotheses", hyps, "hyp", tag="ol"))
    if f.root_cause:
        out.append(f"<h4>Root cause</h4><p class='root'>{_e(f.root_cause)}</p>")
    if f.fixes:
        rows = "".join(
            f"<tr><td class='hz'>{_e(x.horizon)}</td><td>{_e(x.action)}"
            + (f" <code>{_e(x.code.file)}:{_e(x.code.line)}</code>" if x.code else "")
            + "</td></tr>"
            for x in f.fixes
        )
        out.append(f"<h4>Fixes</h4><table class='fixes'>{rows}</table>")
    out.append(_section("Monitoring to add", [_e(m) for m in f.monitoring]))
    ruled = [f"<b>not {_e(r.cause)}</b>: {_e(r.why)}" for r in f.ruled_out]
    out.append(_section("Ruled out", ruled, "ruled"))
    out.append("</article>")
    return "".join(out)


# -- the charts ------------------------------------------------------------------------------
def _figure(fid: str, title: str, svg: str | None, caption: str) -> str:
    body = svg if svg else "<p class='empty'>not recorded in this run</p>"
    return (
        f"<figure class='chart' id='{fid}'><figcaption><b>{_e(title)}</b> {_e(caption)}"
        f"</figcaption>{body}</figure>"
    )


def _marks(log: RunLog, report: Report) -> dict[str, list[int]]:
    loss, norm = log.scalar("loss"), log.scalar("grad_norm")
    bad = {s for s, v in zip(loss.steps, loss.values) if not math.isfinite(v)}
    bad |= {s for s, v in zip(norm.steps, norm.values) if not math.isfinite(v)}
    events = log.events
    found = [(f.kind, f.step) for f in report.findings]
    found += [(r.kind, r.step) for f in report.findings for r in f.related]
    spikes = {step for kind, step in found if kind == "loss_spike" and step is not None}
    return {
        "nonfinite": sorted(bad),
        "spike": sorted(spikes),
        **{
            k: sorted({e.step for e in events if e.kind == k and e.step is not None})
            for k in (
                EventKind.SKIPPED_UPDATE,
                EventKind.CLIPPED,
                EventKind.ROLLBACK,
                EventKind.RESUMED,
            )
        },
    }


def _loss_figures(log: RunLog, report: Report) -> list[str]:
    """The loss chart; with several objectives, one per objective, each with the kind of
    training it was judged as."""
    objectives = report.run.objectives
    if len(objectives) < 2:
        loss = log.scalar("loss")
        chart = (
            charts.loss_chart(loss.steps, loss.values, _marks(log, report)) if loss.steps else None
        )
        said = (
            "with the run's events: NaN/Inf, loss spikes, skipped and clipped steps, "
            "rollbacks, restarts of a resumed run."
        )
        if objectives and objectives[0].training != "supervised":
            o = objectives[0]
            said = f"judged {o.training} ({o.role}): {o.why}. " + said
        if objectives and objectives[0].coverage is not None:
            said = f"{objectives[0].coverage}. " + said
        return [_figure("chart-loss", "Loss", chart, said)]
    out = []
    for k, o in enumerate(objectives):
        loss = log.objective_loss(o.id)
        chart = charts.loss_chart(loss.steps, loss.values, _marks(log, report) if o.id == 0 else {})
        out.append(
            _figure(
                "chart-loss" if k == 0 else f"chart-loss-{o.id}",
                f"Loss of {o.name}",
                chart if loss.steps else None,
                f"judged {o.training} ({o.role}): {o.why}."
                + (f" {o.coverage}." if o.coverage is not None else ""),
            )
        )
    return out


def _entropy_figures(log: RunLog, report: Report) -> list[str]:
    """A chart of each policy's entropy, where the loss's graph showed one."""
    out = []
    for o in report.run.objectives:
        entropy = log.policy_entropy(o.id)
        if o.entropy_first is not None and entropy.steps:
            chart = charts.entropy_chart(entropy.steps, entropy.values, o.name)
            said = (
                "read from the loss's autograd graph at backward() (the first 20 updates, then "
                "one in 10): 1 is uniform over the actions, 0 one action certain."
            )
            out.append(_figure(f"chart-entropy-{o.id}", f"Policy entropy of {o.name}", chart, said))
    return out


MEASURE_CHARTS = 8
"""Charts of the program's own measures at most (those with a direction first)."""
_BETTER = {"up": "higher is better", "down": "lower is better"}


def _measure_figures(log: RunLog, report: Report) -> list[str]:
    """A chart of each measure the program logged itself (``collect.attach.logged``)."""
    out = []
    shown = sorted(report.run.metrics, key=lambda m: m.direction is None)
    for k, m in enumerate(shown[:MEASURE_CHARTS]):
        series = log.metric(m.name)
        if not series.steps:
            continue
        better = _BETTER.get(str(m.direction), "direction unknown")
        chart = charts.measure_chart(series.steps, series.values, m.name, better)
        said = (
            f"logged by the program ({m.source}), by the step in progress when it was "
            f"logged; {better}: {m.direction_from}."
        )
        out.append(_figure(f"chart-measure-{k}", f"The program's {m.name}", chart, said))
    return out


def _attention_figures(log: RunLog, report: Report) -> list[str]:
    """Each attention layer's largest logit gap and entropy, where the loss's graph showed
    attention (``collect.graph.attention``)."""
    layers = report.run.attention
    if not layers:
        return []
    gaps = {a.layer: (list(a.steps), as_floats(a.logit_gap)) for a in layers}
    shares = {a.layer: (list(a.steps), as_floats(a.entropy)) for a in layers}
    said = f"read from the loss's autograd graph at backward(){_cadence(log.meta.attention)}, "
    said += "on one sample's rows: "
    gap = charts.per_layer_chart(
        gaps, "Largest attention logit gap per layer (nats)", "max - min logit"
    )
    share = charts.per_layer_chart(
        shares, "Attention entropy per layer (share of ln keys)", "entropy / ln keys"
    )
    return [
        _figure(
            "chart-attention-gap",
            "Attention logits",
            gap,
            said + "the largest gap between a query's largest and smallest logit; past 50 "
            "the softmax is one-hot (attention_logit_growth).",
        ),
        _figure(
            "chart-attention-entropy",
            "Attention entropy",
            share,
            said + "the rows' mean entropy, 1 uniform over the keys, 0 one key.",
        ),
    ]


def _cadence(read: Mapping[str, Any] | None) -> str:
    """The cadence a graph reader kept to its budget, as the meta says it (`` (every 10
    steps)``), or nothing."""
    when = (read or {}).get("read")
    return f" ({when})" if isinstance(when, str) else ""


def _output_logit_figures(log: RunLog, report: Report) -> list[str]:
    """Each output layer's log Z and largest logit, where the loss's log-softmax showed its
    logits (``collect.graph.output_logits``)."""
    series: dict[str, tuple[list[int], list[float]]] = {}
    for o in report.run.output_logits:
        for values, what in ((o.log_z, "log Z"), (o.top, "largest logit")):
            series[f"{o.layer} {what} ({o.dtype})"] = (list(o.steps), as_floats(values))
    if not series:
        return []
    cadence = _cadence(log.meta.output_logits)
    chart = charts.per_layer_chart(series, "Output logits' level (nats)", "nats", log=False)
    return [
        _figure(
            "chart-output-logits",
            "Output logits",
            chart,
            f"read from the loss's autograd graph at backward(){cadence}: the rows' mean "
            "log-sum-exp (log Z) and largest logit. The softmax cannot see their level; "
            "a z-loss holds log Z near 0. In a 16-bit dtype a level 16 nats from its start, "
            "where the spacing is half a nat, is output_logit_divergence.",
        )
    ]


def _charts(log: RunLog, report: Report) -> list[str]:
    norm = log.scalar("grad_norm")
    out = [
        *_loss_figures(log, report),
        *_entropy_figures(log, report),
        *_measure_figures(log, report),
        *_attention_figures(log, report),
        *_output_logit_figures(log, report),
        _figure(
            "chart-grad-norm",
            "Global gradient norm",
            charts.grad_norm_chart(norm.steps, norm.values) if norm.steps else None,
            "L2 norm over every watched gradient, log scale.",
        ),
    ]
    params = log.params
    table = log.param_table()
    weights = [p for p in params if p.shape and len(p.shape) >= 2] or params
    full = log.steps_with("grad_maxabs")
    flow = None
    if full and weights:
        first_bad = norm.first_nonfinite()
        finite_at = {s for s, v in zip(norm.steps, norm.values) if math.isfinite(v)}
        healthy = [s for s in full if s in finite_at]
        picks = sorted({healthy[0], healthy[len(healthy) // 2], healthy[-1]}) if healthy else []
        if first_bad is not None and first_bad in full:
            picks.append(first_bad)
        at = {}
        for s in picks[-4:]:
            rms, mx = [], []
            for p in weights:
                g, m = table[p.name].grad_norm.at(s), table[p.name].grad_maxabs.at(s)
                rms.append(g / math.sqrt(p.numel) if g is not None and p.numel else math.nan)
                mx.append(m if m is not None else math.nan)
            at[s] = (rms, mx)
        names, at = _bars([p.name for p in weights], at)
        flow = charts.gradient_flow_chart(names, at)
    out.append(
        _figure(
            "chart-grad-flow",
            "Gradient flow",
            flow,
            "RMS |grad| (norm/√n, dark) and max |grad| (light) per weight, input side first, at "
            "the first, middle and last healthy collected steps (and the first bad one)"
            + (
                f"; {len(weights)} weights in {MAX_BARS} bars of consecutive ones (median RMS, "
                "largest max; NaN/Inf when any is)."
                if len(weights) > MAX_BARS
                else "."
            ),
        )
    )
    rows = _even(params, MAX_ROWS)
    steps = _even(sorted({s for p in rows for s in table[p.name].grad_norm.steps}), MAX_COLS)
    grid = [[table[p.name].grad_norm.at(s) for s in steps] for p in rows]
    out.append(
        _figure(
            "chart-grad-heatmap",
            "Gradient norm per layer and step",
            charts.heatmap(
                [p.name for p in rows],
                steps,
                grid,
                "Gradient norm: layer x step",
                "grad norm (log)",
                log=True,
                cmap="magma",
            )
            if steps
            else None,
            "Rows in network order; red: NaN/Inf.",
        )
    )
    out += _activation_charts(log)
    ratios: dict[str, tuple[list[int], list[float]]] = {}
    for p in _even(weights, MAX_LINES):
        r = update_ratio_series(table[p.name].update_norm, table[p.name].weight_norm)
        if r.steps:
            ratios[p.name] = (r.steps, r.values)
    out.append(
        _figure(
            "chart-update-ratio",
            "Update/weight ratio",
            charts.ratio_chart(ratios) if ratios else None,
            "|weights after − before| / |weights before| per optimizer step; ~1e-3 is healthy.",
        )
    )
    return out


def _activation_charts(log: RunLog) -> list[str]:
    """Dead and saturated shares per module over time: one figure, a panel for each."""
    acts = log.activation_table()
    units = log.unit_table()
    modules = [m for m in log.modules if m.name in acts and acts[m.name].numel.steps]
    steps = _even(sorted({s for m in modules for s in acts[m.name].numel.steps}), MAX_COLS)
    functional = log.meta.functional_activations
    relu = [m for m in modules if units.get(m.name) and relu_family(m.type, m.name, functional)]
    dead_rows = _even(relu, MAX_ROWS)
    dead = [
        [dead_share(units[m.name][s]) if units[m.name].get(s) else None for s in steps]
        for m in dead_rows
    ]
    sat_rows = _even([m for m in modules if acts[m.name].sat_frac.steps], MAX_ROWS)
    sat = [[acts[m.name].sat_frac.at(s) for s in steps] for m in sat_rows]
    panels = []
    if dead_rows and steps:
        panels.append(
            charts.heatmap(
                _names(dead_rows),
                steps,
                dead,
                "Dead units: share of units active on < 1% of positions",
                "dead share",
                vmin=0.0,
                vmax=1.0,
                cmap="Reds",
            )
        )
    if sat_rows and steps:
        panels.append(
            charts.heatmap(
                _names(sat_rows),
                steps,
                sat,
                "Saturated share: derivative < 1% of its peak",
                "saturated share",
                vmin=0.0,
                vmax=1.0,
                cmap="Oranges",
            )
        )
    caption = "Per module output (units: features or channels), over the activation steps."
    if not dead_rows:
        caption += " No ReLU module in this model, so no dead-unit panel."
    if not sat_rows:
        caption += " No sigmoid/tanh-family module in this model, so no saturation panel."
    return [_figure("chart-activations", "Activation health", "".join(panels) or None, caption)]


def _names(layers: list[Any]) -> list[str]:
    return [m.name or "(model)" for m in layers]


# -- the page --------------------------------------------------------------------------------
CSS = """
:root { --fg:#111827; --dim:#6b7280; --line:#e5e7eb; --bg:#f9fafb; --red:#dc2626;
        --amber:#d97706; --green:#16a34a; --blue:#2563eb; }
* { box-sizing: border-box; }
body { font: 14px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg);
       background: var(--bg); margin: 0; }
main { max-width: 1100px; margin: 0 auto; padding: 24px; }
header { display: flex; align-items: baseline; gap: 16px; flex-wrap: wrap; }
h1 { font-size: 22px; margin: 0; } h2 { font-size: 18px; margin: 32px 0 12px; }
h3 { font-size: 16px; margin: 0 0 6px; } h4 { font-size: 13px; margin: 14px 0 4px;
     text-transform: uppercase; letter-spacing: .04em; color: var(--dim); }
.status { font-weight: 700; padding: 2px 10px; border-radius: 12px; color: white; }
.status.healthy { background: var(--green); } .status.problems { background: var(--red); }
.status.not_watched { background: var(--dim); }
.meta { color: var(--dim); } code { font: 12px ui-monospace, monospace; background: #eef2ff;
        padding: 1px 4px; border-radius: 4px; }
nav a { margin-right: 12px; color: var(--blue); text-decoration: none; }
.finding { background: white; border: 1px solid var(--line); border-left: 5px solid var(--dim);
           border-radius: 8px; padding: 16px 20px; margin: 12px 0; }
.finding.error { border-left-color: var(--red); }
.finding.warning { border-left-color: var(--amber); }
.sev { text-transform: uppercase; font-size: 11px; padding: 2px 6px; border-radius: 4px;
       background: var(--dim); color: white; vertical-align: middle; }
.error .sev { background: var(--red); } .warning .sev { background: var(--amber); }
.summary { font-weight: 600; } .root { font-weight: 600; }
.origin { background: #fef2f2; border-radius: 6px; padding: 8px 12px; margin-top: 10px; }
.file { font: 12px ui-monospace, monospace; color: var(--dim); }
pre.src { background: #111827; color: #e5e7eb; padding: 8px; border-radius: 6px;
          overflow-x: auto; font-size: 12px; }
pre.src .hit { background: #7f1d1d; color: white; display: inline-block; width: 100%; }
ol.hyp > li { margin-bottom: 6px; } .lk { font-size: 11px; padding: 1px 6px; border-radius: 4px;
      background: #e5e7eb; } .lk.high { background: #fecaca; } .lk.medium { background: #fde68a; }
li.for::marker { content: "+ "; color: var(--green); }
li.against::marker { content: "− "; color: var(--red); }
.check { color: var(--dim); font-size: 12px; }
table.fixes td { padding: 2px 8px 2px 0; vertical-align: top; } td.hz { color: var(--blue);
      white-space: nowrap; font-weight: 600; }
ul.ruled li::marker { content: "✗ "; color: #a21caf; }
figure.chart { background: white; border: 1px solid var(--line); border-radius: 8px;
               padding: 12px; margin: 12px 0; }
figure.chart svg { width: 100%; height: auto; display: block; }
figcaption { margin-bottom: 6px; } .empty { color: var(--dim); font-style: italic; }
.guard { background: #eff6ff; border-radius: 6px; padding: 6px 12px; display: inline-block; }
.dim, .note { color: var(--dim); }
footer { color: var(--dim); margin: 32px 0 8px; font-size: 12px; }
"""


def render(log: RunLog, report: Report) -> str:
    """The whole page as a string."""
    run = report.run
    status = report.status
    title = f"gradoc · {log.dir.name}"
    guard = run.guard
    guard_html = (
        f"<p class='guard'>guard: skipped {_e(guard.skipped)} non-finite steps · "
        f"clipped {_e(guard.clipped)} · rolled back {_e(guard.rollbacks)}"
        + (" · <b>gave up</b>" if guard.gave_up else "")
        + "</p>"
        if guard is not None
        else ""
    )
    findings = "".join(_finding(f) for f in report.findings) or (
        f"<p>Nothing was watched: {_e(report.not_watched)}</p>"
        if report.not_watched
        else "<p>No problem found: the run is healthy.</p>"
    )
    duration = run.duration_s
    meta = " · ".join(
        x
        for x in (
            f"{run.steps} steps",
            f"{duration:.1f} s" if isinstance(duration, (int, float)) else "",
            f"script status: {_e(run.status)}" if run.status else "",
            _e(run.ending) if run.ending else "",
            *(_e(segment.sentence()) for segment in run.segments[1:]),
            f"torch {_e(run.torch)}",
            f"gradoc {_e(run.gradoc)}",
        )
        if x
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}</title><style>{CSS}</style></head>
<body><main>
<header><h1>{_e(title)}</h1><span class="status {_e(status)}" id="status">{_e(status)}</span>
<span class="meta">{meta}</span></header>
<p class="meta">script <code>{_e(run.script)}</code> ·
run log <code>{_e(log.path)}</code></p>
{f'<p class="meta">sampled: {_e(run.sampling)}</p>' if run.sampling else ""}
{guard_html}
<nav><a href="#diagnosis">Diagnosis ({len(report.serious)})</a><a href="#chart-loss">Loss</a>
<a href="#chart-grad-norm">Gradient norm</a><a href="#chart-grad-flow">Gradient flow</a>
<a href="#chart-grad-heatmap">Heatmap</a><a href="#chart-activations">Activations</a>
<a href="#chart-update-ratio">Updates</a></nav>
<section id="diagnosis"><h2>Diagnosis</h2>{findings}</section>
<section id="charts"><h2>Charts</h2>{"".join(_charts(log, report))}</section>
<footer>Generated by gradoc from {_e(log.path)}. Self-contained: no script, no network.</footer>
</main></body></html>
"""


def write_html(log: RunLog, report: Report, path: str | Path) -> Path:
    path = Path(path)
    page = render(log, report)  # before the file is opened: a failure leaves no empty file
    # a path that is not UTF-8 reaches the page as lone surrogates: shown as U+FFFD
    path.write_text(page, encoding="utf-8", errors="replace")
    return path


def write_checkpoint_plan(plan: Plan, budget: float | None, path: Path) -> Path:
    """The checkpointing planner's page: the settings table and the memory-vs-time chart."""
    mib = 2**20
    head = (
        "<tr><th>setting</th><th>segments</th><th>saved MiB</th><th>predicted MiB</th>"
        "<th>peak MiB</th><th>step ms</th><th>x time</th></tr>"
    )
    recommended = plan.recommend(budget)
    best = recommended.setting if recommended is not None else None
    rows = "".join(
        f"<tr class='{'best' if r.setting == best else ''}'>"
        f"<td>{_e(r.setting)}</td><td>{r.segments}</td>"
        f"<td>{r.saved_bytes / mib:.1f}</td><td>{r.predicted_saved_bytes / mib:.1f}</td>"
        f"<td>{r.peak_bytes / mib:.1f}</td><td>{r.step_s * 1e3:.1f}</td>"
        f"<td>{r.time_ratio:.2f}</td></tr>"
        for r in plan.rows
    )
    blocks = "".join(
        f"<tr><td>{_e(b.block)}</td><td>{b.saved_bytes / mib:.1f}</td>"
        f"<td>{b.input_bytes / mib:.2f}</td><td>{(b.fwd_s or 0) * 1e3:.1f}</td>"
        f"<td>{(b.bwd_s or 0) * 1e3:.1f}</td></tr>"
        for b in plan.blocks
    )
    chart = charts.to_svg(charts.memory_time_chart(plan.rows, f"checkpointing {plan.blocks_name}"))
    peak = (
        "measured (torch.cuda.max_memory_allocated)"
        if plan.peak_measured
        else ("saved bytes + the largest segment recomputed (CPU: no allocator statistics)")
    )
    verdict = (
        f"Recommended for a budget of {budget / mib:.0f} MiB: <b>{_e(best)}</b>."
        if budget is not None and best
        else f"No setting fits {budget / mib:.0f} MiB."
        if budget is not None
        else f"Least memory within 1.5x the step time: <b>{_e(best)}</b>."
    )
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>gradoc · checkpointing plan</title>
<style>{CSS} table.plan td, table.plan th {{ padding: 3px 10px; text-align: right; }}
table.plan td:first-child {{ text-align: left; }} tr.best {{ background: #dcfce7; }}</style>
</head><body><main><h1>Checkpointing plan · <code>{_e(plan.blocks_name)}</code></h1>
<p class="meta">device {_e(plan.device)} · peak: {_e(peak)}</p><p>{verdict}</p>
<figure class="chart" id="chart-checkpointing">{chart}</figure>
<h2>Settings</h2><table class="plan" id="settings">{head}{rows}</table>
<h2>Blocks</h2><table class="plan"><tr><th>block</th><th>saved MiB</th><th>input MiB</th>
<th>forward ms</th><th>backward ms</th></tr>{blocks}</table></main></body></html>
"""
    path.write_text(page, encoding="utf-8")
    return path


def write_diff(result: RunDiff, path: Path) -> Path:
    """``gradoc diff``'s page: the explanation, the loss overlay, the layers that differ."""
    chart = charts.overlay_chart(result.loss_steps, result.loss_a, result.loss_b, "Loss: A and B")
    parted, found = result.parted, []
    if parted is not None:
        found = [Difference(parted.layer, parted.statistic, parted.ratio), *parted.others_at_step]
    rows = "".join(
        f"<tr><td>{_e(x.layer)}</td><td>{_e(x.statistic)}</td><td>{x.ratio:.3g}</td></tr>"
        for x in found
    )
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>gradoc diff</title><style>{CSS}</style>
</head><body><main><h1>gradoc diff</h1>
<p class="meta">A <code>{_e(result.run_a)}</code> · B <code>{_e(result.run_b)}</code></p>
<p class="summary" id="explanation">{_e(result.explanation)}</p>
<figure class="chart" id="chart-loss-overlay">{chart}</figure>
<h2>Where the runs part</h2><table class="plan"><tr><th>layer</th><th>statistic</th>
<th>B / A</th></tr>{rows}</table></main></body></html>
"""
    path.write_text(page, encoding="utf-8")
    return path


OBJECTIVE = (
    "<p class='note' id='objective'>The edit changes what the loss computes: the two curves "
    "are different quantities, and were not compared.</p>"
)


def write_fix(result: Comparison, path: Path) -> Path:
    """``gradoc fix``'s page (``fix.html`` beside ``fix.json``): the verdict, the edit as a
    diff, the two runs' losses on one chart, and the findings gone, left and new."""
    before, after, edit = result.before, result.after, result.edit
    a, b = list(before.loss), list(after.loss)
    n = max(len(a), len(b))
    pad = [math.nan] * n
    chart = charts.overlay_chart(
        list(range(n)), (a + pad)[:n], (b + pad)[:n], "Loss: before and after", ("before", "after")
    )
    verdict = result.verdict or ("applied" if result.remedy is not None else "-")
    what = edit.action if edit else result.remedy.describe() if result.remedy else ""
    why = "".join(f"<li>{_e(w)}</li>" for w in result.why_not)
    diff = ""
    if edit is not None and result.diff:
        lines = []
        for line in result.diff.splitlines():
            head = line.startswith(("+++", "---"))
            cls = "" if head else "add" if line[:1] == "+" else "del" if line[:1] == "-" else ""
            lines.append(f"<span class='{cls}'>{_e(line)}</span>")
        diff = f"<h2>The edit</h2><pre class='diff' id='diff'>{chr(10).join(lines)}</pre>"
    found = "".join(
        f"<tr><td>{_e(label)}</td><td><code>{_e(f.kind)}</code></td><td>{_e(f.summary)}</td></tr>"
        for label, some in (
            ("gone", result.disappeared),
            ("left", result.remaining),
            ("new", result.new),
        )
        for f in some
    )
    losses = f"final loss {_num(before.final_loss)} → {_num(after.final_loss)}"
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>gradoc fix</title><style>{CSS}
pre.diff {{ background: #f8fafc; padding: 8px 12px; border-radius: 6px; overflow-x: auto; }}
pre.diff .add {{ color: #15803d; }} pre.diff .del {{ color: #b91c1c; }}</style>
</head><body><main><h1>gradoc fix</h1>
<p class="summary" id="verdict"><b>{_e(verdict)}</b>: {_e(what)}</p>
{f"<ul id='why-not'>{why}</ul>" if why else ""}
{OBJECTIVE if edit is not None and edit.objective else ""}
<p class="meta">before <code>{_e(before.dir)}</code> · after
<code>{_e(after.dir)}</code> · {losses}</p>
{diff}
<figure class="chart" id="chart-loss-before-after">{chart}</figure>
<h2>Findings</h2><table class="plan" id="findings">{found}</table></main></body></html>
"""
    path.write_text(page, encoding="utf-8", errors="replace")
    return path
