"""A small SVG plotting kit for the report's charts: scales, ticks, lines, markers, bars,
heatmaps and legends written straight to SVG text.

Why not matplotlib: laying out and saving six figures cost ~3 s of every run's close (and
~1 s of imports), more than a short script's training. These charts are simple enough to
write directly, in milliseconds, with the same look: a title, left and bottom axes,
light grid lines, log scales by decades.

1. Every string from a run (a module name) passes through ``esc`` (one line, XML
   escaped) in ``Figure.text``; nothing else reaches the page unescaped.
2. A series is decimated per pixel column (first, min, max, last of each column: the
   shape of a 20,000-step curve, spikes kept, in at most ~4 points a pixel) and broken at
   values that cannot be drawn (NaN/Inf, or <= 0 on a log axis), never joined across them.
3. A heatmap is one PNG image (a data URI: nothing fetched), a pixel a cell, scaled up
   without smoothing, so its size does not grow with the cells' count in markup.
"""

from __future__ import annotations

import base64
import html
import math
import struct
import sys
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .._util.text import one_line

FONT = "system-ui, -apple-system, 'Segoe UI', sans-serif"
INK, DIM, GRID = "#111827", "#4b5563", "#e5e7eb"
CHAR_W = 0.58
"""Average glyph width of the sans-serif font, as a share of the font size (for layout)."""

# Colour maps as anchors (matplotlib's values at 0, 1/8, ..., 1), interpolated linearly.
CMAPS = {
    "magma": "000004 1d1147 51127c 832681 b73779 e75263 fc8961 fec488 fcfdbf",
    "Reds": "fff5f0 fee0d2 fcbba1 fc9272 fb694a ee3a2c ca181d a30f15 67000d",
    "Oranges": "fff5eb fee6ce fdd0a2 fdae6a fd8c3b f16813 d84801 a53603 7f2704",
    "viridis": "440154 472d7b 3b528b 2c728e 21918c 28ae80 5ec962 addc30 fde725",
}
_SUPER = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def esc(s: object) -> str:
    return html.escape(one_line(s), quote=True)


def width_of(s: str, size: float) -> float:
    return len(s) * size * CHAR_W


def clip_text(s: str, size: float, room: float) -> str:
    """``s`` shortened with an ellipsis to fit ``room`` pixels (a long module name)."""
    s = one_line(s)
    most = max(4, int(room / (size * CHAR_W)))
    return s if len(s) <= most else s[: most - 1] + "…"


def fmt(v: float) -> str:
    """A tick label: short, no trailing zeros; exponent form for very large or small."""
    if v == 0:
        return "0"
    if abs(v) >= 1e5 or abs(v) < 1e-3:
        m, e = f"{v:.0e}".split("e")
        return f"{m}e{int(e)}"
    return f"{v:.6g}"


def colour(name: str, t: float) -> str:
    """The colour map ``name`` at ``t`` in [0, 1], as ``#rrggbb``."""
    r, g, b = lut(name)[min(255, max(0, round(t * 255)))]
    return f"#{r:02x}{g:02x}{b:02x}"


def lut(name: str) -> np.ndarray:
    """256 RGB rows of the colour map ``name`` (uint8)."""
    anchors = np.array(
        [[int(h[i : i + 2], 16) for i in (0, 2, 4)] for h in CMAPS[name].split()], float
    )
    at = np.linspace(0, 1, len(anchors))
    t = np.linspace(0, 1, 256)
    rgb = np.stack([np.interp(t, at, anchors[:, c]) for c in range(3)], 1)
    out: np.ndarray = rgb.round().astype(np.uint8)
    return out


# -- scales --------------------------------------------------------------------------------
@dataclass
class Scale:
    """Data ``lo..hi`` onto pixels ``a..b`` (``b < a`` for a y axis), linear or log10."""

    lo: float
    hi: float
    a: float
    b: float
    log: bool = False

    def __call__(self, v: float) -> float:
        lo, hi, x = self.lo, self.hi, v
        if self.log:
            lo, hi, x = math.log10(lo), math.log10(hi), math.log10(v)
        # halves: a span of -1e308 to 1e308 stays finite
        return self.a + (x / 2 - lo / 2) / (hi / 2 - lo / 2) * (self.b - self.a)

    def drawable(self, v: float) -> bool:
        return math.isfinite(v) and (v > 0 or not self.log)

    def ticks(self) -> list[tuple[float, str]]:
        if not self.log:
            half = self.hi / 2 - self.lo / 2
            step = nice_step(half / 2.5)
            first = math.ceil(self.lo / step - 1e-9)
            values = [(first + i) * step for i in range(int(half / step * 2) + 2)]
            return [(v, fmt(round(v, 12))) for v in values if self.lo - 1e-9 * step <= v <= self.hi]
        e0, e1 = math.ceil(math.log10(self.lo) - 1e-9), math.floor(math.log10(self.hi) + 1e-9)
        if e1 - e0 >= 1:  # decades: 10^e (every k-th when there are many)
            k = max(1, math.ceil((e1 - e0 + 1) / 8))
            return [(10.0**e, f"10{str(e).translate(_SUPER)}") for e in range(e0, e1 + 1, k)]
        out = []  # under two decades in view: 1, 2, 5 times each power
        for e in range(e0 - 1, e1 + 1):
            for m in (1, 2, 5):
                v = m * 10.0**e
                if self.lo <= v <= self.hi:
                    out.append((v, fmt(v)))
        if len(out) < 2:  # a narrow range (3.1 to 4.5): evenly spaced values, placed on the log
            return Scale(self.lo, self.hi, self.a, self.b).ticks()
        return out


def nice_step(raw: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten that is at least ``raw``."""
    if raw <= 0 or not math.isfinite(raw):
        return 1.0
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw * (1 - 1e-9))


def extent(values: Iterable[float], log: bool = False) -> tuple[float, float] | None:
    """The drawable range of ``values`` (positive ones on a log axis), or None."""
    lo, hi = math.inf, -math.inf
    for v in values:
        if math.isfinite(v) and (v > 0 or not log):
            lo, hi = min(lo, v), max(hi, v)
    return (lo, hi) if lo <= hi else None


def padded(span: tuple[float, float] | None, log: bool, pad: float = 0.05) -> tuple[float, float]:
    """A range with a margin around the data; a single value gets a range around it."""
    if span is None:
        return (1.0, 10.0) if log else (0.0, 1.0)
    lo, hi = span
    if log:
        a, b = math.log10(lo), math.log10(hi)
        d = (b - a) * pad or 0.5
        lo_e = max(a - d, -320.0)  # within the float range, subnormals included
        return 10**lo_e, 10 ** min(max(b + d, lo_e + 1), 308.25)
    d = max((hi / 2 - lo / 2) * 2 * pad, max(abs(lo), abs(hi)) * 1e-6) or 1.0  # flat too
    most = sys.float_info.max
    return max(lo - d, -most), min(hi + d, most)


# -- the figure ------------------------------------------------------------------------------
@dataclass
class Figure:
    """An SVG document of ``width`` x ``height`` pixels being written, part by part."""

    width: float
    height: float
    parts: list[str] = field(default_factory=list)

    def text(
        self,
        x: float,
        y: float,
        s: str,
        size: float = 11,
        anchor: str = "start",
        fill: str = INK,
        bold: bool = False,
        rotate: float = 0,
        tip: str | None = None,
    ) -> None:
        rot = f' transform="rotate({rotate:g} {x:.1f} {y:.1f})"' if rotate else ""
        weight = ' font-weight="bold"' if bold else ""
        body = f"<title>{esc(tip)}</title>{esc(s)}" if tip and tip != s else esc(s)
        self.parts.append(
            f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size:g}" text-anchor="{anchor}" '
            f'fill="{fill}"{weight}{rot}>{body}</text>'
        )

    def line(
        self, x1: float, y1: float, x2: float, y2: float, stroke: str, w: float = 1, dash: str = ""
    ) -> None:
        d = f' stroke-dasharray="{dash}"' if dash else ""
        self.parts.append(
            f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{stroke}" '
            f'stroke-width="{w:g}"{d}/>'
        )

    def rect(self, x: float, y: float, w: float, h: float, fill: str, opacity: float = 1.0) -> None:
        o = f' fill-opacity="{opacity:g}"' if opacity < 1 else ""
        self.parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{max(h, 0):.1f}" '
            f'fill="{fill}"{o}/>'
        )

    def image(self, x: float, y: float, w: float, h: float, rgb: np.ndarray) -> None:
        """An RGB array (rows x cols x 3, uint8) stretched over the box, cells kept sharp."""
        self.parts.append(
            f'<image x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" '
            'preserveAspectRatio="none" style="image-rendering:pixelated" '
            f'href="data:image/png;base64,{png(rgb)}"/>'
        )

    def svg(self) -> str:
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {self.width:g} '
            f'{self.height:g}" width="{self.width:g}" height="{self.height:g}" '
            f'font-family="{FONT}">' + "".join(self.parts) + "</svg>"
        )


def png(rgb: np.ndarray) -> str:
    """An RGB uint8 array as a base64 PNG (no filter, zlib): the format's bare minimum."""
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[i].tobytes() for i in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    body = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw, 6))
        + chunk(b"IEND", b"")
    )
    return base64.b64encode(body).decode("ascii")


# -- axes ------------------------------------------------------------------------------------
MARKS = {
    # shape -> path around (0, 0), about 8 px across
    "x": "M-3.5,-3.5L3.5,3.5M-3.5,3.5L3.5,-3.5",
    "^": "M0,-4.5L4,3L-4,3Z",
    "v": "M0,4.5L4,-3L-4,-3Z",
    "|": "M0,-5L0,5",
    "D": "M0,-4.5L4,0L0,4.5L-4,0Z",
    "s": "M-3,-3L3,-3L3,3L-3,3Z",
}
_STROKED = {"x", "|"}


def _paint(shape: str, colour: str) -> str:
    """A marker's paint: crosses and ticks are stroked, the others filled."""
    if shape in _STROKED:
        return f'fill="none" stroke="{colour}" stroke-width="1.6"'
    return f'fill="{colour}" stroke="none"'


@dataclass
class Axes:
    """A plot area in a figure, with its x and y scales."""

    fig: Figure
    x: Scale
    y: Scale

    @property
    def box(self) -> tuple[float, float, float, float]:
        """Left, top, right, bottom in pixels."""
        return self.x.a, self.y.b, self.x.b, self.y.a

    def frame(
        self,
        title: str = "",
        xlabel: str = "",
        ylabel: str = "",
        xticks: bool = True,
        yticks: bool = True,
        grid: bool = True,
    ) -> None:
        """Grid lines, the left and bottom axes with their ticks, labels and the title."""
        f, (left, top, right, bottom) = self.fig, self.box
        if yticks:
            for v, s in self.y.ticks():
                py = self.y(v)
                if grid:
                    f.line(left, py, right, py, GRID)
                f.line(left - 4, py, left, py, DIM)
                f.text(left - 6, py + 3.5, s, 10, "end", DIM)
        if xticks:
            for v, s in self.x.ticks():
                px = self.x(v)
                if grid:
                    f.line(px, top, px, bottom, GRID)
                f.line(px, bottom, px, bottom + 4, DIM)
                f.text(px, bottom + 15, s, 10, "middle", DIM)
        f.line(left, top, left, bottom, DIM)
        f.line(left, bottom, right, bottom, DIM)
        if title:
            f.text((left + right) / 2, top - 13, title, 12, "middle", bold=True)
        if xlabel:
            f.text((left + right) / 2, bottom + 31, xlabel, 11, "middle")
        if ylabel:
            cy = (top + bottom) / 2
            f.text(left - 52, cy, ylabel, 11, "middle", rotate=-90)

    def series(self, xs: Sequence[float], ys: Sequence[float], stroke: str, w: float = 1.3) -> None:
        """A line through the points in order, decimated per pixel column, broken where a
        value cannot be drawn."""
        runs: list[list[tuple[float, float]]] = [[]]
        for xv, yv in zip(xs, ys):
            if self.x.drawable(xv) and self.y.drawable(yv):
                runs[-1].append((self.x(xv), self.y(yv)))
            elif runs[-1]:
                runs.append([])
        d = []
        for run in runs:
            pts = decimate(run)
            if len(pts) == 1:  # a lone point between gaps: a dot
                x0, y0 = pts[0]
                d.append(f"M{x0 - 0.6:.1f},{y0:.1f}L{x0 + 0.6:.1f},{y0:.1f}")
            elif pts:
                d.append("M" + "L".join(f"{px:.1f},{py:.1f}" for px, py in pts))
        if d:
            self.fig.parts.append(
                f'<path d="{"".join(d)}" fill="none" stroke="{stroke}" stroke-width="{w:g}" '
                'stroke-linejoin="round"/>'
            )

    def marks(
        self, points: Iterable[tuple[float, float]], colour: str, shape: str, pixels: bool = False
    ) -> None:
        """A marker at each point (data coordinates, or pixels with ``pixels``); points that
        fall on the same pixel are drawn once."""
        seen = set()
        for xv, yv in points:
            px, py = (xv, yv) if pixels else (self.x(xv), self.y(yv))
            seen.add((round(px), round(py)))
        if not seen:
            return
        self.fig.parts.append(
            f"<g {_paint(shape, colour)}>"
            + "".join(
                f'<path transform="translate({px},{py})" d="{MARKS[shape]}"/>'
                for px, py in sorted(seen)
            )
            + "</g>"
        )

    def band(self, lo: float, hi: float, colour: str, opacity: float) -> None:
        """A horizontal band between two y values, across the plot."""
        left, top, right, bottom = self.box
        y0 = min(max(self.y(hi), top), bottom)
        y1 = min(max(self.y(lo), top), bottom)
        self.fig.rect(left, y0, right - left, y1 - y0, colour, opacity)


def decimate(pts: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """At most four points per pixel column (its first, lowest, highest and last), in order:
    a long curve drawn with the same pixels, spikes and all."""
    if len(pts) <= 2000:
        return pts
    out: list[tuple[float, float]] = []
    col: list[tuple[float, float]] = []
    for p in pts:
        if col and round(p[0]) != round(col[0][0]):
            out += _column(col)
            col = []
        col.append(p)
    return out + _column(col)


def _column(col: list[tuple[float, float]]) -> list[tuple[float, float]]:
    if len(col) <= 4:
        return col
    lo = min(col, key=lambda p: p[1])
    hi = max(col, key=lambda p: p[1])
    middle = sorted({lo, hi} - {col[0], col[-1]}, key=col.index)
    return [col[0], *middle, col[-1]]


def legend(
    fig: Figure,
    items: Sequence[tuple[str, str, str]],
    x: float,
    y: float,
    *,
    across: bool = True,
    anchor: str = "start",
    room: float = 220,
) -> None:
    """Legend entries ``(label, colour, kind)``, kind a marker shape, ``"line"`` or
    ``"box"``: in a row from ``x`` (``anchor`` "middle" or "end" to centre or right-align
    it) or a column."""
    size = 10
    texts = [clip_text(name, size, room) for name, _, _ in items]
    widths = [24 + width_of(t, size) + 14 for t in texts]
    if across:
        total = sum(widths)
        x0 = x - total / 2 if anchor == "middle" else x - total if anchor == "end" else x
    else:
        x0 = x
    cx, cy = x0, y
    for (name, c, kind), text, w in zip(items, texts, widths):
        if kind == "line":
            fig.line(cx, cy - 3.5, cx + 18, cy - 3.5, c, 2)
        elif kind == "box":
            fig.rect(cx, cy - 9, 18, 10, c)
        else:
            fig.parts.append(
                f'<path transform="translate({cx + 9:.1f},{cy - 3.5:.1f})" d="{MARKS[kind]}" '
                f"{_paint(kind, c)}/>"
            )
        fig.text(cx + 24, cy, text, size, tip=name)
        if across:
            cx += w
        else:
            cy += 15
