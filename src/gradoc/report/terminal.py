"""The terminal summary of a run (``gradoc report``, end of ``gradoc run``)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .._util.text import number, one_line, safe
from ..analysis import GuardSummary, Report, as_floats
from ..detect.finding import Finding, State
from ..detect.precision import AmpAdvice
from ..fix.compare import Comparison
from ..store import RunLog, Series, open_run
from .results import AmpComparison, Plan

_BARS = "▁▂▃▄▅▆▇█"
_STYLE = {"error": "bold red", "warning": "bold yellow", "info": "cyan"}
_LIKELY = {"high": "bold red", "medium": "yellow", "low": "dim"}


@contextlib.contextmanager
def status(message: str) -> Iterator[None]:
    """A spinner on stderr while long work runs (the message may hold user names)."""
    with Console(stderr=True).status(_t(message)):
        yield


def sparkline(values: list[float], width: int = 40) -> str:
    """A one-line chart; non-finite values show as ``×``."""
    if not values:
        return ""
    if len(values) > width:  # bucket by mean, keeping non-finite buckets visible
        size = len(values) / width
        buckets = [
            values[int(i * size) : max(int((i + 1) * size), int(i * size) + 1)]
            for i in range(width)
        ]
        values = [
            math.nan if any(not math.isfinite(v) for v in b) else sum(b) / len(b) for b in buckets
        ]
    finite = [v for v in values if math.isfinite(v)]
    lo, hi = (min(finite), max(finite)) if finite else (0.0, 0.0)
    span = hi - lo or 1.0
    return "".join(
        _BARS[int((v - lo) / span * (len(_BARS) - 1))] if math.isfinite(v) else "×" for v in values
    )


def _t(x: object, style: str = "") -> Text:
    """Text from the user's program or a run log: a rich ``Text`` (never parsed as markup,
    so a module named ``[/INST]`` prints as itself) with control characters escaped."""
    return Text(safe(x), style=style)


def _name(x: object, style: str = "") -> Text:
    """A name (module, parameter, file): ``_t`` on one line."""
    return Text(one_line(x), style=style)


def _num(x: object) -> str:
    """Numbers as :func:`gradoc._util.text.number` writes them; anything else made safe."""
    if x is not None and (isinstance(x, bool) or not isinstance(x, (int, float))):
        return safe(x)
    return number(x)


def _series_line(name: str, s: Series) -> Text | None:
    if not s.values:
        return None
    finite = [v for v in s.values if math.isfinite(v)]
    text = Text(f"{name:<10}", style="bold")  # gradoc's own series names
    text.append(sparkline(s.values), style="green")
    text.append(f"  first {_num(s.values[0])}  last {_num(s.values[-1])}")
    if finite:
        text.append(f"  min {_num(min(finite))}  max {_num(max(finite))}")
    return text


MEASURES_SHOWN = 8
"""The program's own measures shown at most (those with a direction first)."""


def _measure_lines(report: Report, console: Console) -> None:
    """The measures the program logged itself (``run.metrics``): where they were read, and
    each one's series with the way it is better."""
    shown = sorted(report.run.metrics, key=lambda m: m.direction is None)
    if not shown:
        return
    sources = sorted({m.source for m in shown})
    console.print(_t(f"the program's own measures (read from {', '.join(sources)}):", style="dim"))
    width = min(24, max(len(m.name) for m in shown[:MEASURES_SHOWN]))
    for m in shown[:MEASURES_SHOWN]:
        text = Text(f"{m.name[:width]:<{width}}  ", style="bold")
        text.append(sparkline(as_floats(m.values)), style="cyan")
        text.append(f"  first {_num(m.first)}  last {_num(m.last)}")
        if m.direction is not None:
            text.append(f"  best {_num(m.best)}")
            way = "higher" if m.direction == "up" else "lower"
            text.append(f"  ({way} is better: {m.direction_from})", style="dim")
        else:
            text.append(f"  (direction unknown: {m.direction_from})", style="dim")
        console.print(text)
    if len(shown) > MEASURES_SHOWN:
        more = len(shown) - MEASURES_SHOWN
        console.print(_t(f"and {more} more (report.json run.metrics)", style="dim"))


def _attention_lines(report: Report, console: Console) -> None:
    """The attention series of the layer a precursor finding names (``attn gap``: its largest
    logit gap; ``attn H``: its entropy share)."""
    named = {
        layer
        for f in report.findings
        for kind, layer in [(f.kind, f.layer), *((r.kind, r.layer) for r in f.related)]
        if kind == "attention_logit_growth"
    }
    for a in report.run.attention:
        if a.layer not in named:
            continue
        console.print(_t(f"attention of {a.layer}", style="dim"))
        for name, values in (("attn gap", a.logit_gap), ("attn H", a.entropy)):
            line = _series_line(name, Series(list(a.steps), as_floats(values)))
            if line is not None:
                console.print(line)


def _output_logit_lines(report: Report, console: Console) -> None:
    """The log Z series of the output layer a precursor finding names (``log Z``)."""
    named = {f.layer for f in report.findings if f.kind == "output_logit_divergence"}
    for o in report.run.output_logits:
        if o.layer in named:
            console.print(_t(f"output logits of {o.layer} ({o.dtype})", style="dim"))
            line = _series_line("log Z", Series(list(o.steps), as_floats(o.log_z)))
            if line is not None:
                console.print(line)


def print_run_summary(out: Path, report: Report, stderr: bool = True) -> None:
    """The diagnosis at the end of a run; on stderr by default, so it survives `> log`."""
    with open_run(out) as log:
        print_summary(log, report, Console(stderr=stderr))


def print_summary(run: RunLog, report: Report, console: Console | None = None) -> None:
    """Print what a person reads first: status, curves, the layers to look at, findings."""
    console = console or Console()
    info = report.run
    status = report.status
    head = Text("gradoc ", style="bold")
    if status == "not_watched":
        head.append("watched nothing", style="bold yellow")
    else:
        head.append(
            "healthy" if status == "healthy" else "problems found",
            style="bold green" if status == "healthy" else "bold red",
        )
    head.append(f"  ·  {info.steps} steps")
    counted = [c for c in info.steps_counted_by if c != "optimizer.step()"]
    if counted and isinstance(counted[0], str):  # say so when it is not an optimizer's
        head.append(f" ({one_line(counted[0])} calls, no optimizer)")
    if info.duration_s is not None:
        head.append(f" in {info.duration_s:.1f}s")
    if info.status == "gave_up":
        head.append("  ·  the guard stopped training", style="bold red")
    elif info.status not in (None, "finished"):
        head.append(f"  ·  script {one_line(info.status)}", style="yellow")
    console.print(head)
    if info.ending:
        console.print(_t(info.ending, style="yellow"))
    for segment in info.segments[1:]:
        console.print(_t(segment.sentence(), style="dim"))
    if report.not_watched:
        console.print(_t(report.not_watched, style="yellow"))
    for part in info.unwatched:
        console.print(_t(f"not watched: {part}", style="dim"))
    if info.guard is not None:
        console.print(_guard_line(info.guard))
    if info.loss_read:
        console.print(_t(f"loss: {info.loss_read}", style="dim"))
    for o in info.objectives:  # a loss read on fewer than all its steps: how many, and why
        if o.coverage is not None:
            named = f"objective {o.name}: " if len(info.objectives) > 1 else ""
            console.print(_t(named + o.coverage, style="yellow"))
    if info.sampling:
        console.print(_t(f"sampled: {info.sampling}", style="dim"))
    clip = info.clipping
    if clip is not None and clip.steps:
        said = (
            f"clipping: the program's {clip.fn} at {clip.threshold} bit on "
            f"{clip.bit} of {clip.steps} steps"
        )
        if clip.median_factor is not None:
            said += f" (median factor {clip.median_factor:.3g})"
        console.print(_t(said + "; the gradient norms below are before it", style="dim"))
    several = len(info.objectives) > 1 or any(o.training != "supervised" for o in info.objectives)
    for o in info.objectives if several else []:
        said = f"objective {o.name}: judged {o.training} ({o.role}), {o.why}"
        console.print(_t(said, style="dim"))
    if len(info.objectives) > 1:  # one series each, named after what it trains
        for o in info.objectives:
            line = _series_line(o.name[:10], run.objective_loss(o.id))
            if line is not None:
                console.print(line)
    for name in ("grad_norm",) if len(info.objectives) > 1 else ("loss", "grad_norm"):
        line = _series_line(name, run.scalar(name))
        if line is not None:
            console.print(line)
    for o in info.objectives:  # a policy's entropy, a share of its maximum
        if o.entropy_first is not None:
            named = "entropy" if len(info.objectives) == 1 else f"{o.name[:7]} H"
            line = _series_line(named, run.policy_entropy(o.id))
            if line is not None:
                console.print(line)
    _measure_lines(report, console)
    _attention_lines(report, console)
    _output_logit_lines(report, console)

    norms = run.scalar("grad_norm")
    if norms.steps:
        # the step a person wants to see: where the first problem was found, else the last
        # step with every statistic (max-abs follows the sparser params schedule)
        flagged = [f.step for f in report.findings if f.step in norms.steps]
        full = run.steps_with("grad_maxabs")
        at = flagged[0] if flagged else (full[-1] if full else norms.steps[-1])
        stats = run.param_stats_at(at)
        if not stats and full:  # that step's per-layer rows were thinned: the nearest kept
            at = min(full, key=lambda s: abs(s - at))
            stats = run.param_stats_at(at)
        ranked = sorted(stats.items(), key=lambda kv: _rank(kv[1]["grad_norm"]), reverse=True)[:5]
        if ranked:
            table = Table(title=f"largest gradients at step {at}", title_justify="left", box=None)
            for col in ("parameter", "grad norm", "grad max-abs", "non-finite"):
                table.add_column(col, justify="left" if col == "parameter" else "right")
            for name, s in ranked:
                table.add_row(
                    _name(name),
                    _num(s["grad_norm"]),
                    _num(s["grad_maxabs"]),
                    _num(s["grad_nonfinite"]),
                )
            console.print(table)

    for f in report.findings:
        console.print(_headline(f))
        console.print(_finding(f))
    if report.amp is not None:
        console.print(_amp_block(report.amp))
    console.print(Text("run log  ", style="dim") + _name(run.path, "dim"))


def _amp_block(amp: AmpAdvice) -> Text:
    """Mixed-precision readiness (``--check amp``): the recommendation in a few lines."""
    text = Text("\nmixed precision", style="bold")
    text.append(f"  ({amp.sampled_steps} sampled steps)\n", style="dim")
    if amp.loss_scale:
        k = int(amp.loss_scale).bit_length() - 1
        text.append(f"  fp16: GradScaler(init_scale=2**{k})")
        text.append(f", {amp.underflow_at_scale:.2%} of gradient values still below 2^-24\n")
    else:
        text.append("  fp16: no loss scale avoids gradient overflow\n", style="red")
    if amp.fp32_modules:
        names = ", ".join(one_line(m) for m in amp.fp32_modules[:6])
        text.append(f"  keep in fp32: {names}\n", style="yellow")
    verdict = "bf16" if amp.prefer_bf16 else "fp16 + GradScaler (or bf16)"
    text.append(f"  recommendation: {verdict}: {safe(amp.why)}", style="bold")
    return text


def _guard_line(g: GuardSummary) -> Text:
    """What the guard did: a run it kept alive says so before anything else."""
    text = Text("guard    ", style="bold")
    text.append(
        safe(
            f"skipped {g.skipped} non-finite steps · clipped {g.clipped} · "
            f"rolled back {g.rollbacks}"
        )
    )
    if g.lr_scale != 1.0:
        text.append(f" · learning rate x{g.lr_scale:g}")
    if g.gave_up:
        text.append("  ·  gave up", style="bold red")
    return text


def _headline(f: Finding) -> Text:
    head = Text(f"\n{one_line(f.severity).upper()} ", style=_STYLE.get(f.severity, ""))
    head.append(one_line(f.kind), style="bold")
    if f.step is not None:
        head.append(f" at step {one_line(f.step)}")
    if f.layer is not None:
        head.append(f" in {one_line(f.layer or '(model)')}", style="bold")
    head.append(f": {safe(f.summary)}")
    return head


def _finding(f: Finding) -> Table:
    """One problem as a compact two-column block: label, then what the run shows."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="dim", no_wrap=True, min_width=11)
    grid.add_column(overflow="fold")
    if f.symptom:
        grid.add_row("symptom", _t(f.symptom))
    for i, e in enumerate(f.evidence):
        at = f" (step {safe(e.step)})" if e.step is not None else ""
        grid.add_row("signals" if i == 0 else "", _t(f"· {e.signal}: {_num(e.value)}{at}"))
    for i, r in enumerate(f.related):
        grid.add_row("also" if i == 0 else "", _t(f"· {r.summary}", style="yellow"))
    for i, h in enumerate(f.hypotheses):
        line = Text(f"{i + 1}. ", style="bold")
        line.append(f"[{h.likelihood}] ", style=_LIKELY.get(h.likelihood, ""))
        line.append(safe(h.cause))
        for s in h.claims(State.SEEN):
            line.append(f"\n   + {safe(s)}", style="green")
        for s in h.claims(State.CONTRADICTED):
            line.append(f"\n   - {safe(s)}", style="red")
        if h.check:
            line.append(f"\n   check: {safe(h.check)}", style="dim")
        grid.add_row("hypotheses" if i == 0 else "", line)
    if f.root_cause:
        grid.add_row("root cause", _t(f.root_cause, style="bold"))
    for i, fix in enumerate(f.fixes):
        line = Text(f"{fix.horizon!s:<11}", style="cyan")
        line.append(safe(fix.action))
        grid.add_row("fixes" if i == 0 else "", line)
    for i, m in enumerate(f.monitoring):
        grid.add_row("monitor" if i == 0 else "", _t(f"· {m}"))
    for i, out in enumerate(f.ruled_out):
        line = Text(f"✗ not {safe(out.cause)}: ", style="magenta")
        line.append(safe(out.why))
        grid.add_row("ruled out" if i == 0 else "", line)
    return grid


def _rank(x: float | None) -> float:
    if x is None:
        return -1.0
    return math.inf if not math.isfinite(x) else x


def _guard_text(g: GuardSummary | None) -> str:
    if g is None:
        return "-"
    text = f"skipped {g.skipped} · clipped {g.clipped} · rolled back {g.rollbacks}"
    return text + (" · gave up" if g.gave_up else "")


def print_comparison(
    result: Comparison | None,
    remedy: Any,
    code_fixes: list[Any],
    console: Console | None = None,
) -> None:
    """Before and after a fix side by side (``gradoc fix``, ``gradoc run --fix``); then the
    fixes that need a code change, with the file and line."""
    console = console or Console()
    if result is not None:
        b, a = result.before, result.after
        table = Table(
            title=_t(f"before / after  ·  fix: {remedy.describe()}"),
            title_justify="left",
            title_style="bold",
            box=None,
        )
        table.add_column("")
        table.add_column("before", justify="left")
        table.add_column("after", justify="left")
        style = {"healthy": "green", "problems": "red"}
        table.add_row(
            "status",
            _t(b.status, style=style.get(b.status, "")),
            _t(a.status, style=style.get(a.status, "")),
        )
        table.add_row("loss", sparkline(b.loss, 24), sparkline(a.loss, 24))
        table.add_row("final loss", _t(_num(b.final_loss)), _t(_num(a.final_loss)))
        nan = [
            f"step {x.first_nonfinite_loss}" if x.first_nonfinite_loss is not None else "-"
            for x in (b, a)
        ]
        table.add_row("first NaN/Inf loss", _t(nan[0]), _t(nan[1]))
        table.add_row("steps", _t(_num(b.steps)), _t(_num(a.steps)))
        per_step = [f"{x * 1e3:.3g} ms" if x else "-" for x in (b.s_per_step, a.s_per_step)]
        if result.time_per_step_ratio:
            per_step[1] += f" ({result.time_per_step_ratio:.2f}x)"
        table.add_row("time per step", *map(_t, per_step))
        table.add_row("guard", _t(_guard_text(b.guard)), _t(_guard_text(a.guard)))
        console.print(table)
        for label, found, mark, color in (
            ("gone", result.disappeared, "✓", "green"),
            ("still there", result.remaining, "✗", "red"),
            ("new", result.new, "!", "yellow"),
        ):
            for f in found:
                line = Text(f"{mark} {label:<12}", style=color)
                line.append(one_line(f.kind), style="bold")
                line.append(f"  {safe(f.summary)}")
                console.print(line)
    for fix in code_fixes:
        line = Text("needs a code change  ", style="bold yellow")
        line.append(safe(f"{fix.finding}: {fix.action}"))
        console.print(line)
        if fix.file:
            where = Text(f"    {one_line(fix.file)}:{fix.line}", style="cyan")
            if fix.code:
                where.append(f"  {one_line(fix.code)}", style="dim")
            console.print(where, highlight=False)


def print_checkpoint_plan(plan: Plan, budget: float | None, console: Console | None = None) -> None:
    """The planner's settings table and its recommendation."""
    console = console or Console()
    mib = 2**20
    table = Table(
        title=_name(f"checkpointing {plan.blocks_name} ({len(plan.blocks)} blocks)"),
        title_justify="left",
        box=None,
    )
    for col in ("setting", "segments", "saved MiB", "predicted", "peak MiB", "step ms", "x time"):
        table.add_column(col, justify="left" if col == "setting" else "right")
    recommended = plan.recommend(budget)
    best = recommended.setting if recommended is not None else None
    for r in plan.rows:
        table.add_row(
            _name(r.setting),
            _t(r.segments),
            f"{r.saved_bytes / mib:.1f}",
            f"{r.predicted_saved_bytes / mib:.1f}",
            f"{r.peak_bytes / mib:.1f}",
            f"{r.step_s * 1e3:.1f}",
            f"{r.time_ratio:.2f}",
            style="bold green" if r.setting == best else None,
        )
    console.print(table)
    if budget is not None:
        verdict = (
            f"for {budget / mib:.0f} MiB: {one_line(best)}"
            if best
            else (f"no setting fits {budget / mib:.0f} MiB")
        )
    else:
        verdict = f"least memory within 1.5x the step time: {one_line(best)}"
    console.print(Text(f"recommended  {verdict}", style="bold"))


def print_amp_compare(result: AmpComparison, console: Console | None = None) -> None:
    """fp32 against autocast: loss drift, per-layer gradient error, scaler, speed, memory."""
    console = console or Console()
    dtype, tol, fp32, amp = result.dtype, result.tolerance, result.fp32, result.amp
    console.print(Text(f"fp32 vs {dtype} autocast, {result.steps} steps", style="bold"))
    table = Table(box=None)
    for col in ("", "fp32", dtype):
        table.add_column(col, justify="left" if not col else "right")
    table.add_row("loss", sparkline(fp32.loss, 20), sparkline(amp.loss, 20))
    table.add_row("final loss", _num(fp32.loss[-1]), _num(amp.loss[-1]))
    table.add_row("largest loss difference", "", f"{result.max_loss_rel_diff:.2%}")
    table.add_row(
        "median step",
        f"{fp32.step_s * 1e3:.2f} ms" if fp32.step_s else "-",
        (f"{amp.step_s * 1e3:.2f} ms" if amp.step_s else "-")
        + (f" ({result.speedup:.2f}x faster)" if result.speedup else ""),
    )
    kind = "GPU peak" if result.peak_kind == "cuda" else "process peak RSS"
    table.add_row(kind, f"{fp32.peak_bytes / 2**20:.0f} MiB", f"{amp.peak_bytes / 2**20:.0f} MiB")
    if result.scale_history is not None:
        last = result.scale_history[-1] if result.scale_history else None
        table.add_row("loss scale (last)", "", _num(last))
        table.add_row("skipped steps", "", _t(result.scaler_skipped or "none"))
    console.print(table)
    grads = Table(
        title="first step's gradient, relative error per layer", title_justify="left", box=None
    )
    grads.add_column("layer")
    grads.add_column("|g_amp - g_fp32| / |g_fp32|", justify="right")
    worst = sorted(result.layers, key=lambda x: -x.rel_error)[:8]
    for x in worst:
        bad = not (x.rel_error <= tol)
        grads.add_row(_name(x.layer), f"{x.rel_error:.2e}", style="red" if bad else None)
    console.print(grads)
    if len(result.layers) > len(worst):
        console.print(
            f"(the largest {len(worst)} of {len(result.layers)}; all in the JSON)", style="dim"
        )
    first = result.first_layer_beyond_tolerance
    console.print(
        Text(
            f"first layer beyond {tol:g}: {one_line(first)}"
            if first
            else f"every layer within {tol:g}",
            style="bold red" if first else "bold green",
        )
    )
