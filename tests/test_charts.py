"""The report's charts, written as SVG directly: well-formed, escaped, faithful to the data."""

from __future__ import annotations

import base64
import math
import re
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
import zlib

import pytest

from gradoc.report import _svg as svg
from gradoc.report import charts

NS = "{http://www.w3.org/2000/svg}"
EVIL = "<script>alert(1)</script>&\x1b[2J"


def parse(text: str) -> ET.Element:
    """The chart as XML: a chart that is not well-formed fails here."""
    root = ET.fromstring(text)
    assert root.tag == f"{NS}svg" and root.get("viewBox")
    return root


def texts(root: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for t in root.iter(f"{NS}text")]


def subpaths(d: str) -> list[list[tuple[float, float]]]:
    return [
        [(float(x), float(y)) for x, y in re.findall(r"(-?[\d.]+),(-?[\d.]+)", part)]
        for part in d.split("M")[1:]
    ]


def decode_png(uri: str) -> list[list[tuple[int, int, int]]]:
    """The RGB rows of a PNG written by ``_svg.png`` (no filter), read back by hand."""
    data = base64.b64decode(uri.split(",", 1)[1])
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    w, h = struct.unpack(">II", data[16:24])
    pos, idat = 8, b""
    while pos < len(data):
        n = struct.unpack(">I", data[pos : pos + 4])[0]
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        crc = struct.unpack(">I", data[pos + 8 + n : pos + 12 + n])[0]
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF
        idat += body if kind == b"IDAT" else b""
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = 1 + 3 * w
    rows = []
    for i in range(h):
        line = raw[i * stride : (i + 1) * stride]
        assert line[0] == 0
        rows.append([tuple(line[1 + 3 * j : 4 + 3 * j]) for j in range(w)])
    return rows


def test_every_report_chart_is_well_formed_and_a_hostile_name_is_only_text() -> None:
    marks = {"nonfinite": [3], "spike": [5], "skipped_update": [3], "clipped": [7], "rollback": [8]}
    loss = [1.0, 0.9, 0.8, math.nan, 0.7, 5.0, 0.6, 0.5, 0.4, 0.3]
    drawn = [
        charts.loss_chart(list(range(10)), loss, marks),
        charts.grad_norm_chart(list(range(10)), [1.0, math.inf, 0.5, *[0.1] * 7]),
        charts.gradient_flow_chart([EVIL, "b"], {0: ([1e-3, math.nan], [1e-2, 1.0])}),
        charts.heatmap([EVIL, "b"], [0, 10], [[1.0, None], [math.inf, 2.0]], "t", "c", log=True),
        charts.ratio_chart({EVIL: ([1, 2, 3], [1e-3, 2e-3, 0.0])}),
        charts.overlay_chart([0, 1, 2], [1.0, 0.5, 0.2], [1.0, 0.7, math.nan], EVIL),
    ]
    for text in drawn:
        parse(text)
        assert "<script" not in text
        assert "\x1b" not in text  # control characters shown as escapes, never raw
    named = [t for text in drawn[2:] for t in texts(parse(text)) if "alert" in t]
    assert len(named) >= 4  # the name is on every chart that shows names, as text
    assert all("<script>alert(1)</script>" in t and "\\x1b" in t for t in named)


def test_a_long_series_is_decimated_and_keeps_its_spike_and_its_gaps() -> None:
    steps = list(range(20_000))
    values = [1.0 + 0.001 * (s % 7) for s in steps]
    values[12_345] = 50.0  # one spike
    values[15_000] = math.nan  # a gap: the line is broken there, never joined across it
    root = parse(charts.loss_chart(steps, values, {}))
    (line,) = [p for p in root.iter(f"{NS}path") if p.get("stroke") == charts._BLUE]
    parts = subpaths(line.get("d", ""))
    assert len(parts) == 2  # broken at the NaN
    points = sum(len(p) for p in parts)
    assert points < 4_000  # four points a pixel column at most, not 20,000
    top = min(y for part in parts for _, y in part)
    spike = [x for part in parts for x, y in part if y == top]
    assert len(spike) == 1
    axis = svg.Scale(*charts._steps(steps), charts.LEFT, charts.W - charts.RIGHT)
    assert spike[0] == pytest.approx(axis(12_345), abs=0.6)  # at the spike's step


def test_a_log_axis_skips_values_it_cannot_draw_and_ticks_by_decades() -> None:
    scale = svg.Scale(1e-4, 1e2, 100, 0, log=True)
    ticks = scale.ticks()
    assert [v for v, _ in ticks] == [1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0]
    assert ticks[0][1] == "10⁻⁴" and ticks[-1][1] == "10²"
    assert scale(1e-4) == 100 and scale(1e2) == 0 and scale(1e-1) == pytest.approx(50)
    assert not scale.drawable(0.0) and not scale.drawable(math.nan) and scale.drawable(1e-9)
    narrow = svg.Scale(3.1, 4.5, 100, 0, log=True).ticks()  # no 1-2-5 value inside
    assert len(narrow) >= 2 and all(3.1 <= v <= 4.5 for v, _ in narrow)
    linear = svg.Scale(0, 19_999, 0, 800).ticks()
    assert [v for v, _ in linear] == [0, 5_000, 10_000, 15_000]
    assert svg.padded((2.0, 2.0), False)[0] < 2.0 < svg.padded((2.0, 2.0), False)[1]


def test_a_heatmap_is_one_image_a_pixel_a_cell_with_nan_red_and_missing_blank() -> None:
    grid = [[1e-3, 1e-1, None], [math.nan, 1e1, 1e1]]
    root = parse(charts.heatmap(["a", "b"], [0, 5, 10], grid, "t", "norm", log=True, cmap="magma"))
    image, colourbar = list(root.iter(f"{NS}image"))
    cells = decode_png(image.get("href", ""))
    assert len(cells) == 2 and len(cells[0]) == 3
    magma = svg.lut("magma")
    assert cells[0][0] == tuple(magma[0])  # the smallest value: the map's low end
    assert cells[1][1] == tuple(magma[255]) == cells[1][2]  # the largest: its high end
    assert cells[0][1] == tuple(magma[round(255 * 2 / 4)])  # 1e-1: halfway on the log scale
    assert cells[0][2] == (243, 244, 246)  # not collected: blank
    assert cells[1][0] == (220, 38, 38)  # NaN: red
    bar = decode_png(colourbar.get("href", ""))
    assert bar[0][0] == tuple(magma[255]) and bar[-1][0] == tuple(magma[0])  # high on top
    assert "NaN/Inf" in texts(root)


def test_writing_the_report_page_does_not_import_matplotlib(tmp_path: object) -> None:
    code = """
import sys, torch, gradoc
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
with gradoc.watch(model, opt, out=sys.argv[1]) as run:
    for _ in range(20):
        opt.zero_grad(); model(torch.randn(8, 4)).pow(2).mean().backward(); opt.step()
page = (run.dir / "report.html").read_text()
print(page.count("<svg"), "matplotlib" in sys.modules)
"""
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    count, imported = done.stdout.split()
    assert int(count) >= 6 and imported == "False"


def test_extreme_values_draw_well_formed_charts_with_finite_coordinates() -> None:
    """±1e308, subnormals, zeros, NaN/Inf, one step or a trillion: never an exception, a
    coordinate that is NaN/Inf, or a warning."""
    import random
    import warnings

    values = [1e308, -1e308, 5e-324, 0.0, -0.0, math.nan, math.inf, -math.inf, 1.0, -1e-300]
    rng = random.Random(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(40):
            k = rng.choice([1, 2, 3, 50])
            steps = sorted(rng.sample(range(-5, 10 ** rng.choice([1, 6, 12]) + k), k))
            ys = [rng.choice(values) * rng.choice([1.0, rng.random()]) for _ in steps]
            row = [rng.choice([*values, None]) for _ in steps[:5]]
            drawn = [
                charts.loss_chart(steps, ys, {"nonfinite": steps[:2], "spike": steps[:1]}),
                charts.grad_norm_chart(steps, ys),
                charts.ratio_chart({"a": (steps, ys)}),
                charts.overlay_chart(steps, ys, ys[::-1], "t"),
                charts.gradient_flow_chart(["x"] * len(ys), {1: (ys, ys[::-1])}),
                charts.heatmap(["r"], steps[:5], [row], "t", "c", log=rng.random() < 0.5),
            ]
            for text in drawn:
                parse(text)
                numbers = re.findall(r' (?:[xy][12]?|width|height)="([^"]*)"', text)
                assert all(math.isfinite(float(n)) for n in numbers)
                assert not re.search(r"(?i)(nan|inf)[,L M\"]", text.replace("NaN/Inf", ""))
