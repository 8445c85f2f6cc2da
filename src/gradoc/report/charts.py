"""The report's charts, drawn with matplotlib as inline SVG (text kept as text, so the page
stays searchable and a name from the user's code is escaped XML, never markup).

Every function takes what it draws as plain data (from the run log) and returns an SVG
string; matplotlib is imported on first use.
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

from .._text import one_line

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


def _svg(fig: Any) -> str:
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


def loss_chart(steps: Sequence[int], values: Sequence[float], marks: dict[str, list[int]]) -> str:
    """The loss with event markers; non-finite losses sit on the top edge as red crosses."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 3.2))
    fs, fv = _finite(steps, values)
    ax.plot(fs, fv, color=_BLUE, lw=1.2, label="loss")
    if fv and min(fv) > 0 and max(fv) / min(fv) > 1e3:
        ax.set_yscale("log")
    top = max(fv) if fv else 1.0
    bottom = min(fv) if fv else 0.0
    value_at = dict(zip(fs, fv))
    for kind, at in marks.items():
        if not at:
            continue
        name, colour, marker = MARKERS[kind]
        if kind == "rollback":
            for s in at:
                ax.axvline(s, color=colour, ls="--", lw=1)
        y = [value_at.get(s, top) if kind in ("spike",) else top for s in at]
        if kind == "clipped":
            y = [bottom for _ in at]
        ax.scatter(at, y, color=colour, marker=marker, s=28, zorder=3, label=name, clip_on=False)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title("Training loss")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=8, frameon=False, ncols=6)
    return _svg(fig)


def grad_norm_chart(steps: Sequence[int], values: Sequence[float]) -> str:
    """The global gradient norm on a log scale; steps where it was NaN/Inf marked in red."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 2.8))
    fs, fv = _finite(steps, values)
    positive = [(s, v) for s, v in zip(fs, fv) if v > 0]
    ax.plot([s for s, _ in positive], [v for _, v in positive], color=_GREEN, lw=1.2)
    bad = [s for s, v in zip(steps, values) if not math.isfinite(v)]
    if bad:
        top = max((v for _, v in positive), default=1.0)
        ax.scatter(bad, [top] * len(bad), color=_RED, marker="x", s=28, label="NaN/Inf")
        ax.legend(loc="upper right", fontsize=8, frameon=False)
    if positive:
        ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("global grad norm")
    ax.set_title("Global gradient norm (log scale)")
    return _svg(fig)


def gradient_flow_chart(names: list[str], at: dict[int, tuple[list[float], list[float]]]) -> str:
    """The classic gradient-flow bar chart: per layer in network order, RMS |grad| (dark)
    and max |grad| (light), one panel per chosen step, log scale."""
    plt = _plt()
    n = max(1, len(at))
    fig, axes = plt.subplots(n, 1, figsize=(9, 0.6 + 2.2 * n), squeeze=False, sharex=True)
    x = list(range(len(names)))
    for ax, (step, (rms, mx)) in zip(axes[:, 0], at.items()):
        clean_max = [v if math.isfinite(v) and v > 0 else math.nan for v in mx]
        clean_rms = [v if math.isfinite(v) and v > 0 else math.nan for v in rms]
        ax.bar(x, clean_max, color="#93c5fd", label="max |grad|")
        ax.bar(x, clean_rms, color=_BLUE, width=0.5, label="RMS |grad|")
        bad = [i for i, v in enumerate(mx) if not math.isfinite(v) or not math.isfinite(rms[i])]
        if bad:
            ax.scatter(
                bad,
                [1.0] * len(bad),
                color=_RED,
                marker="x",
                label="NaN/Inf",
                transform=ax.get_xaxis_transform(),
            )
        if any(v == v for v in clean_max + clean_rms):  # NaN != NaN: some bar to draw
            ax.set_yscale("log")
        else:
            ax.set_yticks([])
        ax.set_ylabel(f"step {step}")
        ax.legend(loc="upper right", fontsize=8, frameon=False, ncols=3)
    axes[0, 0].set_title("Gradient flow: |grad| per layer, input side first")
    axes[-1, 0].set_xticks(x, [label(s) for s in names], rotation=60, ha="right", fontsize=7)
    return _svg(fig)


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
    plt = _plt()
    import numpy as np
    from matplotlib.colors import LogNorm, Normalize

    bad = np.array([[v is not None and not math.isfinite(v) for v in r] for r in grid], bool)
    shown = np.array(
        [[v if v is not None and math.isfinite(v) else np.nan for v in r] for r in grid], float
    )
    if log:
        shown = np.where(shown > 0, shown, np.nan)
    finite = shown[np.isfinite(shown)]
    lo = vmin if vmin is not None else (float(finite.min()) if finite.size else 1.0)
    hi = vmax if vmax is not None else (float(finite.max()) if finite.size else 1.0)
    if hi <= lo:
        hi = lo * 10 if log else lo + 1
    norm = LogNorm(lo, hi) if log else Normalize(lo, hi)
    height = min(9.0, 1.2 + 0.22 * len(rows))
    fig, ax = plt.subplots(figsize=(9, height))
    colours = plt.get_cmap(cmap).with_extremes(bad="#f3f4f6")
    image = ax.imshow(shown, aspect="auto", interpolation="nearest", cmap=colours, norm=norm)
    if bad.any():
        ys, xs = np.nonzero(bad)
        ax.scatter(xs, ys, color=_RED, marker="s", s=10, label="NaN/Inf")
        ax.legend(loc="upper right", fontsize=8, frameon=False)
    ax.set_yticks(range(len(rows)), [label(r) for r in rows], fontsize=7)
    ticks = list(range(0, len(cols), max(1, len(cols) // 10)))
    ax.set_xticks(ticks, [str(cols[i]) for i in ticks])
    ax.set_xlabel("step")
    ax.grid(False)
    ax.set_title(title)
    fig.colorbar(image, ax=ax, label=cbar, fraction=0.03, pad=0.01)
    return _svg(fig)


def ratio_chart(series: dict[str, tuple[list[int], list[float]]]) -> str:
    """Update/weight ratio per layer over steps, log scale, with the healthy band ~1e-3."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 3.2))
    colours = plt.get_cmap("viridis")
    n = max(1, len(series) - 1)
    for i, (name, (steps, values)) in enumerate(series.items()):
        pts = [(s, v) for s, v in zip(steps, values) if math.isfinite(v) and v > 0]
        ax.plot(
            [s for s, _ in pts], [v for _, v in pts], lw=1, color=colours(i / n), label=label(name)
        )
    ax.axhspan(1e-4, 1e-2, color=_GREEN, alpha=0.08, label="healthy ~1e-3")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("|update| / |weight|")
    ax.set_title("Update/weight ratio per layer")
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7, frameon=False)
    return _svg(fig)


def memory_time_chart(rows: list[dict[str, Any]], title: str) -> Any:
    """Checkpointing settings: peak activation memory against step time (a figure)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for r in rows:
        x, y = r["step_s"] * 1e3, r["peak_bytes"] / 2**20
        ax.scatter(x, y, s=40, color=_BLUE if r["every"] else _RED, zorder=3)
        ax.annotate(
            label(r["setting"]), (x, y), fontsize=8, xytext=(5, 4), textcoords="offset points"
        )
    ax.set_xlabel("step time (ms)")
    ax.set_ylabel("peak activation memory (MiB)")
    ax.set_title(label(title))
    return fig


def to_svg(fig: Any) -> str:
    return _svg(fig)


def to_png(fig: Any, path: Any) -> None:
    plt = _plt()
    with _quiet():
        fig.savefig(path, bbox_inches="tight", dpi=120)
    plt.close(fig)


def overlay_chart(steps: list[int], a: list[float], b: list[float], title: str) -> str:
    """Two runs' losses on one axis (``gradoc diff``)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 3))
    ax.plot(steps, a, color=_BLUE, lw=1.1, label="A")
    ax.plot(steps, b, color=_ORANGE, lw=1.1, label="B")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(label(title))
    ax.legend(frameon=False)
    return _svg(fig)
