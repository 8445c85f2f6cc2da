"""The report's charts, as inline SVG strings (text kept as text, so the page stays
searchable, and every name from the user's code escaped XML, never markup).

Every function takes what it draws as plain data (from the run log) and returns an SVG
string written directly by ``_svg`` (milliseconds, no matplotlib): a report is written at
the close of every run. The checkpointing planner's memory-vs-time figure is the one still
drawn with matplotlib (it is also saved as PNG); matplotlib is imported on its first use.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import re
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from .._util.text import one_line
from . import _svg as svg
from .results import PlanRow

_BLUE, _ORANGE, _RED, _GREEN, _PURPLE, _GREY = (
    "#2563eb",
    "#ea580c",
    "#dc2626",
    "#16a34a",
    "#7c3aed",
    "#6b7280",
)
MARKERS = {
    # event kind -> (label, colour, marker)
    "nonfinite": ("NaN/Inf", _RED, "x"),
    "spike": ("loss spike", _ORANGE, "^"),
    "skipped_update": ("step skipped", "#b45309", "v"),
    "clipped": ("gradient clipped", _BLUE, "|"),
    "rollback": ("rollback", _PURPLE, "D"),
    "resumed": ("resumed", "#6b7280", "|"),
}


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "svg.fonttype": "none",  # text as <text>: searchable, escaped by the SVG writer
            "font.family": "sans-serif",
            "font.size": 9,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.grid": True,
            "grid.alpha": 0.25,
            "axes.titleweight": "bold",
            "axes.titlesize": 10,
            "figure.dpi": 100,
        }
    )
    return plt


def label(text: str) -> str:
    """A user string as a matplotlib label: ``$`` would start mathtext; control characters
    are shown as escapes."""
    return one_line(text).replace("$", r"\$")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """matplotlib's own complaints (a glyph missing from the font for a name in the user's
    model, a font family not found) are gradoc's business, not the user's stderr."""
    logger = logging.getLogger("matplotlib")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def to_svg(fig: Any) -> str:
    """A matplotlib figure as inline SVG (the checkpointing planner's page)."""
    plt = _plt()
    buf = io.StringIO()
    with _quiet():
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)  # RDF boilerplate
    return text[text.index("<svg") :]  # drop the XML prolog and doctype: inline in HTML


def _finite(steps: Sequence[int], values: Sequence[float]) -> tuple[list[int], list[float]]:
    pairs = [(s, v) for s, v in zip(steps, values) if math.isfinite(v)]
    return [s for s, _ in pairs], [v for _, v in pairs]


# The SVG charts: 900 px wide (figures scale to the page), axes inside these margins.
W, LEFT, RIGHT, TOP = 900, 72, 20, 36


def _axes(
    fig: svg.Figure,
    x: tuple[float, float],
    y: tuple[float, float],
    bottom: float,
    *,
    ylog: bool = False,
    right: float = RIGHT,
    top: float = TOP,
) -> svg.Axes:
    """Axes over the figure's width between ``top`` and ``bottom`` (pixels)."""
    return svg.Axes(
        fig,
        svg.Scale(*x, LEFT, fig.width - right),
        svg.Scale(*y, bottom, top, ylog),
    )


def _steps(steps: Sequence[int]) -> tuple[float, float]:
    return svg.padded(svg.extent(float(s) for s in steps), False, 0.02)


def loss_chart(steps: Sequence[int], values: Sequence[float], marks: dict[str, list[int]]) -> str:
    """The loss with event markers; non-finite losses sit on the top edge as red crosses."""
    fs, fv = _finite(steps, values)
    log = bool(fv) and min(fv) > 0 and max(fv) / min(fv) > 1e3
    fig = svg.Figure(W, 330)
    ax = _axes(fig, _steps(steps), svg.padded(svg.extent(fv, log), log), 250, ylog=log)
    ax.frame("Training loss", "step", "loss")
    ax.series(steps, values, _BLUE)  # broken at the NaN/Inf steps, marked on the top edge
    left, top, right, bottom = ax.box
    value_at = dict(zip(fs, fv))
    items = [("loss", _BLUE, "line")]
    for kind, at in marks.items():
        if not at:
            continue
        name, colour, marker = MARKERS[kind]
        if kind in ("rollback", "resumed"):
            for s in at:
                fig.line(ax.x(s), top, ax.x(s), bottom, colour, 1, "4 3")
        if kind == "spike":  # at the loss it reached
            points = [(ax.x(s), ax.y(value_at[s])) for s in at if s in value_at]
        else:  # on the top edge (clipped steps on the bottom edge)
            points = [(ax.x(s), bottom if kind == "clipped" else top) for s in at]
        ax.marks(points, colour, marker, pixels=True)
        items.append((name, colour, marker))
    svg.legend(fig, items, (left + right) / 2, 312, anchor="middle")
    return fig.svg()


def _log_series(
    steps: Sequence[int], values: Sequence[float], title: str, ylabel: str
) -> tuple[svg.Figure, svg.Axes]:
    """One series over the steps, on a log scale when some value is positive: the figure
    and its axes."""
    log = svg.extent(values, log=True) is not None
    fig = svg.Figure(W, 290)
    ax = _axes(fig, _steps(steps), svg.padded(svg.extent(values, log), log), 240, ylog=log)
    ax.frame(title, "step", ylabel)
    ax.series(steps, values, _GREEN)
    return fig, ax


def grad_norm_chart(steps: Sequence[int], values: Sequence[float]) -> str:
    """The global gradient norm on a log scale; steps where it was NaN/Inf marked in red."""
    fig, ax = _log_series(steps, values, "Global gradient norm (log scale)", "global grad norm")
    bad = [s for s, v in zip(steps, values) if not math.isfinite(v)]
    if bad:
        ax.marks([(ax.x(s), ax.box[1]) for s in bad], _RED, "x", pixels=True)
        svg.legend(fig, [("NaN/Inf", _RED, "x")], W - RIGHT, 18, anchor="end")
    return fig.svg()


def entropy_chart(steps: Sequence[int], values: Sequence[float], name: str) -> str:
    """A policy's entropy as a share of its maximum, on a log scale (a collapse falls by
    orders of magnitude)."""
    title = f"Policy entropy of {name} (share of ln k, log scale)"
    fig, _ = _log_series(steps, values, title, "entropy / ln k")
    return fig.svg()


def measure_chart(steps: Sequence[int], values: Sequence[float], name: str, said: str) -> str:
    """One of the program's own measures over the steps, on a linear scale (a return may be
    negative); ``said``: which way it is better, in the title."""
    _, fv = _finite(steps, values)
    fig = svg.Figure(W, 290)
    ax = _axes(fig, _steps(steps), svg.padded(svg.extent(fv), False), 240)
    ax.frame(f"{name} ({said})", "step", name)
    ax.series(steps, values, _GREEN)
    return fig.svg()


def gradient_flow_chart(names: list[str], at: dict[int, tuple[list[float], list[float]]]) -> str:
    """The classic gradient-flow bar chart: per layer in network order, RMS |grad| (dark)
    and max |grad| (light), one panel per chosen step, log scale."""
    panel, gap, size = 150, 22, 8
    labels = [svg.clip_text(n, size, 170) for n in names]
    under = max((svg.width_of(t, size) for t in labels), default=0) * 0.87 + 16
    fig = svg.Figure(W, TOP + len(at) * (panel + gap) + under)
    n = max(1, len(names))
    any_bad = False
    for i, (step, (rms, mx)) in enumerate(at.items()):
        top = TOP + i * (panel + gap)
        span = svg.extent([*rms, *mx], log=True)
        ax = _axes(fig, (0, n), svg.padded(span, True), top + panel, ylog=True, top=top)
        last = i == len(at) - 1
        ax.frame(
            "" if i else "Gradient flow: |grad| per layer, input side first",
            ylabel=f"step {step}",
            xticks=False,
            yticks=span is not None,
        )
        slot = (ax.x.b - ax.x.a) / n
        base = ax.box[3]
        for values, share, colour in ((mx, 0.8, "#93c5fd"), (rms, 0.5, _BLUE)):
            for k, v in enumerate(values):
                if ax.y.drawable(v):
                    y = min(ax.y(v), base)
                    x = ax.x(k + 0.5) - share * slot / 2
                    fig.rect(x, y, share * slot, base - y, colour)
        bad = [k for k in range(len(mx)) if not math.isfinite(mx[k]) or not math.isfinite(rms[k])]
        any_bad |= bool(bad)
        ax.marks([(ax.x(k + 0.5), ax.box[1]) for k in bad], _RED, "x", pixels=True)
        if last:
            for k, (text, full) in enumerate(zip(labels, names)):
                x = ax.x(k + 0.5)
                fig.text(x, base + 10, text, size, "end", svg.DIM, rotate=-60, tip=full)
    items = [("max |grad|", "#93c5fd", "box"), ("RMS |grad|", _BLUE, "box")]
    items += [("NaN/Inf", _RED, "x")] if any_bad else []
    svg.legend(fig, items, W - RIGHT, 14, anchor="end")
    return fig.svg()


def heatmap(
    rows: list[str],
    cols: list[int],
    grid: list[list[float | None]],
    title: str,
    cbar: str,
    *,
    log: bool = False,
    vmin: float | None = None,
    vmax: float | None = None,
    cmap: str = "viridis",
) -> str:
    """A layer x step heatmap; NaN/Inf cells drawn red, cells not collected left blank."""
    size = 9
    labels = [svg.clip_text(r, size, 230) for r in rows]
    left = max((svg.width_of(t, size) for t in labels), default=0) + 14
    height = min(900.0, 120 + 22 * len(rows))
    fig = svg.Figure(left + 900 - LEFT, height)
    shown = np.array(
        [[v if v is not None and math.isfinite(v) else np.nan for v in r] for r in grid], float
    ).reshape(len(rows), len(cols))
    bad = np.array(
        [[v is not None and not math.isfinite(v) for v in r] for r in grid], bool
    ).reshape(shown.shape)
    if log:
        shown = np.where(shown > 0, shown, np.nan)
    finite = shown[np.isfinite(shown)]
    lo = vmin if vmin is not None else (float(finite.min()) if finite.size else 1.0)
    hi = vmax if vmax is not None else (float(finite.max()) if finite.size else 1.0)
    if hi <= lo:  # one value: a range around it
        lo, hi = svg.padded((lo, lo), log)

    def unit(v: np.ndarray) -> np.ndarray:
        out: np.ndarray = (
            (np.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
            if log
            else (v / 2 - lo / 2) / (hi / 2 - lo / 2)  # halves: no overflow at 1e308
        )
        return out

    table = svg.lut(cmap)
    with np.errstate(invalid="ignore", divide="ignore"):
        t = np.nan_to_num(unit(shown), nan=0.0).clip(0, 1)
    rgb = table[(t * 255).round().astype(int)]
    rgb[np.isnan(shown)] = (243, 244, 246)
    rgb[bad] = (220, 38, 38)
    x0, x1, y0, y1 = left, fig.width - 110, TOP, height - 42
    fig.image(x0, y0, x1 - x0, y1 - y0, rgb)
    fig.line(x0, y1, x1, y1, svg.DIM)
    fig.line(x0, y0, x0, y1, svg.DIM)
    fig.text((x0 + x1) / 2, y0 - 13, title, 12, "middle", bold=True)
    cell = (y1 - y0) / max(1, len(rows))
    every = max(1, math.ceil(9 / cell))  # labels at least 9 px apart
    for i in range(0, len(rows), every):
        y = y0 + (i + 0.5) * cell
        fig.text(x0 - 6, y + 3, labels[i], size, "end", svg.DIM, tip=rows[i])
    width = (x1 - x0) / max(1, len(cols))
    for j in range(0, len(cols), max(1, len(cols) // 10)):
        x = x0 + (j + 0.5) * width
        fig.line(x, y1, x, y1 + 4, svg.DIM)
        fig.text(x, y1 + 15, str(cols[j]), 10, "middle", svg.DIM)
    fig.text((x0 + x1) / 2, y1 + 31, "step", 11, "middle")
    # the colour bar: the map from bottom (low) to top (high), with its scale's ticks
    bar = svg.Scale(lo, hi, y1, y0, log)
    fig.image(x1 + 14, y0, 14, y1 - y0, table[::-1].reshape(256, 1, 3))
    for v, s in bar.ticks():
        fig.line(x1 + 28, bar(v), x1 + 32, bar(v), svg.DIM)
        fig.text(x1 + 35, bar(v) + 3.5, s, 10, "start", svg.DIM)
    fig.text(fig.width - 12, (y0 + y1) / 2, cbar, 11, "middle", rotate=-90)
    if bad.any():
        svg.legend(fig, [("NaN/Inf", _RED, "s")], x1, 14, anchor="end")
    return fig.svg()


def ratio_chart(series: dict[str, tuple[list[int], list[float]]]) -> str:
    """Update/weight ratio per layer over steps, log scale, with the healthy band ~1e-3."""
    title, ylabel = "Update/weight ratio per layer", "|update| / |weight|"
    return per_layer_chart(series, title, ylabel, band=(1e-4, 1e-2, "healthy ~1e-3"))


def per_layer_chart(
    series: dict[str, tuple[list[int], list[float]]],
    title: str,
    ylabel: str,
    band: tuple[float, float, str] | None = None,
    log: bool = True,
) -> str:
    """One line per layer over the steps, log scale (``log``: else linear, for values of
    either sign); ``band``: a shaded range (low, high, its legend), always in view."""
    fig = svg.Figure(W + 130, 320)
    values = [v for _, vs in series.values() for v in vs]
    span = svg.extent([*values, *(band[:2] if band else ())], log=log)
    steps = [s for ss, _ in series.values() for s in ss]
    ax = _axes(fig, _steps(steps), svg.padded(span, log), 272, ylog=log, right=230)
    if band:
        ax.band(band[0], band[1], _GREEN, 0.08)
    ax.frame(title, "step", ylabel)
    n = max(1, len(series) - 1)
    items = []
    for i, (name, (steps_i, values_i)) in enumerate(series.items()):
        c = svg.colour("viridis", i / n)
        ax.series(steps_i, values_i, c, 1.1)
        items.append((name, c, "line"))
    if band:
        items.append((band[2], "#d1fae5", "box"))
    svg.legend(fig, items, ax.box[2] + 16, TOP + 10, across=False, room=190)
    return fig.svg()


def memory_time_chart(rows: list[PlanRow], title: str) -> Any:
    """Checkpointing settings: peak activation memory against step time (a figure)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for r in rows:
        x, y = r.step_s * 1e3, r.peak_bytes / 2**20
        ax.scatter(x, y, s=40, color=_BLUE if r.every else _RED, zorder=3)
        ax.annotate(label(r.setting), (x, y), fontsize=8, xytext=(5, 4), textcoords="offset points")
    ax.set_xlabel("step time (ms)")
    ax.set_ylabel("peak activation memory (MiB)")
    ax.set_title(label(title))
    return fig


def to_png(fig: Any, path: Any) -> None:
    plt = _plt()
    with _quiet():
        fig.savefig(path, bbox_inches="tight", dpi=120)
    plt.close(fig)


def overlay_chart(
    steps: list[int],
    a: list[float],
    b: list[float],
    title: str,
    names: tuple[str, str] = ("A", "B"),
) -> str:
    """Two runs' losses on one axis (``gradoc diff``; ``gradoc fix``'s before and after), on
    a log scale when they span more than 1,000x (a blow-up beside its fixed run)."""
    fv = [v for v in (*a, *b) if math.isfinite(v)]
    log = bool(fv) and min(fv) > 0 and max(fv) / min(fv) > 1e3
    fig = svg.Figure(W, 300)
    ax = _axes(fig, _steps(steps), svg.padded(svg.extent(fv, log), log), 250, ylog=log)
    ax.frame(title, "step", "loss")
    ax.series(steps, a, _BLUE, 1.2)
    ax.series(steps, b, _ORANGE, 1.2)
    items = [(names[0], _BLUE, "line"), (names[1], _ORANGE, "line")]
    svg.legend(fig, items, W - RIGHT, 18, anchor="end")
    return fig.svg()
