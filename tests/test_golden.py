"""Golden reports: the terminal and JSON reports of three gallery scenarios.

A change to detection, diagnosis or rendering shows here as a diff against the files in
``tests/golden``. Everything is compared exactly but the numbers: another CPU's vector
units reduce float32 in another order, and the last printed digit of a norm or an attention
value differs (0.948444 against 0.948443). So a number with a point or an exponent matches
within one unit of its last printed digit, or a relative ``REL`` (1e-4), whichever is wider;
an integer (a step, a count) matches exactly; the text between numbers matches exactly, its
whitespace collapsed (a number one digit longer may move a line break). A change of diagnosis
differs far more. ``test_the_comparison_takes_rounding_and_nothing_else`` shows both halves.
When the change is intended, regenerate the files and review the diff with
``git diff tests/golden``:

    GRADOC_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py
"""

from __future__ import annotations

import difflib
import io
import json
import math
import os
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from rich.console import Console

import gradoc
from gradoc.demo.gallery import GALLERY
from gradoc.report import Report, print_summary

GOLDEN = Path(__file__).parent / "golden"
SCENARIOS = ("dead-relu", "exploding-init", "padding-leak")
VOLATILE = {
    "started_at",
    "ended_at",
    "duration_s",
    "argv",
    "script",
    "dir",
    "path",
    "gradoc",
    "torch",
}
"""Report fields that differ from run to run (times, paths, versions)."""


def _normal(x: Any) -> Any:
    if isinstance(x, float):
        # NOTE: 6 significant digits, all printed (1.00000): the last printed digit of each
        # number is its sixth, which another CPU's rounding may move (``same``)
        return f"{_MARK}{x:#.6g}{_MARK}" if math.isfinite(x) else x
    if isinstance(x, dict):
        return {k: "*" if k in VOLATILE else _normal(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_normal(v) for v in x]
    if isinstance(x, str):
        return re.sub(r"/\S*?pytest\S*|/tmp/\S+", "<tmp>", x)
    return x


_MARK = "\x00"


def _json(report: dict[str, Any]) -> str:
    """The report normalised: volatile fields starred, numbers at 6 significant digits."""
    text = json.dumps(_normal(report), indent=1, sort_keys=True) + "\n"
    return re.sub(r'"\\u0000(.*?)\\u0000"', r"\1", text)


def _terminal(run_dir: Path, report: dict[str, Any]) -> str:
    out = io.StringIO()
    console = Console(file=out, width=100, color_system=None, force_terminal=False)
    with gradoc.open_run(run_dir) as log:
        print_summary(log, Report.from_json(report), console)
    text = re.sub(r"[ \t]+\n", "\n", out.getvalue())
    text = re.sub(r"steps in [0-9.]+ ?[a-z]*", "steps in *", text)  # the wall time
    return _normal(text)  # type: ignore[no-any-return]


REL = 1e-4
"""The relative tolerance of a number with a point or an exponent (beside one unit of its
last printed digit)."""
NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d+|\d+)(?:[eE][-+]?\d+)?(?![\d.])")
"""A number as printed: not a part of a name (``layers.0.1.weight``, ``fc2``)."""


def _unit(token: str) -> float:
    """One unit of the last printed digit of a number written with a point or exponent."""
    mantissa, _, exponent = token.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 10.0 ** (int(exponent or 0) - decimals)


def _close(want: str, got: str) -> bool:
    if want == got:
        return True
    whole = all(c in "+-0123456789" for c in want + got)
    if whole:  # a step, a count: exactly
        return False
    a, b = float(want), float(got)
    slack = max(_unit(want), _unit(got), REL * max(abs(a), abs(b)))
    return abs(a - b) <= slack * (1 + 1e-9)


def same(want: str, got: str) -> bool:
    """``got`` is ``want`` but for rounding: the text between numbers equal (whitespace
    collapsed), the numbers within the tolerance of the module docstring."""
    w, g = NUMBER.split(want), NUMBER.split(got)
    if len(w) != len(g) or [" ".join(t.split()) for t in w] != [" ".join(t.split()) for t in g]:
        return False
    return all(_close(a, b) for a, b in zip(NUMBER.findall(want), NUMBER.findall(got)))


def _compare(path: Path, text: str) -> None:
    if os.environ.get("GRADOC_UPDATE_GOLDEN"):
        path.write_text(text)
        return
    want = path.read_text()
    if not same(want, text):
        diff = difflib.unified_diff(
            want.splitlines(), text.splitlines(), str(path), "this run", lineterm=""
        )
        pytest.fail(f"{path.name} changed:\n" + "\n".join(diff), pytrace=False)


@pytest.mark.parametrize("name", SCENARIOS)
def test_report_matches_its_golden_file(tmp_path: Path, name: str) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the same float reductions wherever the suite runs
    try:
        run_dir = GALLERY[name].problem(tmp_path / "problem")
    finally:
        torch.set_num_threads(threads)
    report = json.loads((run_dir / "report.json").read_text())
    _compare(GOLDEN / f"{name}.json", _json(report))
    _compare(GOLDEN / f"{name}.txt", _terminal(run_dir, report))


def _perturbed(text: str, step: int) -> str:
    """Every number written with a point or an exponent moved by ``step`` units of its last
    printed digit (what another CPU's rounding does, at most, for ``step`` 1)."""

    def move(m: re.Match[str]) -> str:
        token = m.group(0)
        if all(c in "+-0123456789" for c in token):
            return token
        mantissa, e, exponent = token.partition("e") if "e" in token else token.partition("E")
        digits = mantissa.lstrip("+-")
        sign = mantissa[: len(mantissa) - len(digits)]
        whole, _, frac = digits.partition(".")
        n = int(whole + frac) + step
        if n < 0 or len(str(n)) > len(whole + frac):  # across zero or a new digit: left
            return token
        moved = str(n).rjust(len(whole + frac), "0")
        cut = len(moved) - len(frac)
        return sign + moved[:cut] + ("." if "." in digits else "") + moved[cut:] + e + exponent

    return NUMBER.sub(move, text)


@pytest.mark.parametrize("name", [f"{s}.{x}" for s in SCENARIOS for x in ("json", "txt")])
def test_the_comparison_takes_rounding_and_nothing_else(name: str) -> None:
    """Each golden file with every number moved one unit in its last printed digit still
    matches; a word, an integer or a number moved 1% does not."""
    want = (GOLDEN / name).read_text()
    assert same(want, _perturbed(want, 1)) and same(want, _perturbed(want, -1))
    assert _perturbed(want, 1) != want  # the files hold numbers that can move
    assert not same(want, want.replace("step", "stop", 1))
    first_int = next(m for m in NUMBER.finditer(want) if m.group(0).isdigit())
    bumped = str(int(first_int.group(0)) + 1)
    assert not same(want, want[: first_int.start()] + bumped + want[first_int.end() :])
    value = next(
        m
        for m in NUMBER.finditer(want)
        if "." in (t := m.group(0))
        and "e" not in t.lower()
        and len(t.partition(".")[2]) >= 2
        and abs(float(t)) >= 0.1
    )
    decimals = len(value.group(0).partition(".")[2])
    shifted = f"{float(value.group(0)) * 1.01:.{decimals}f}"  # printed as it was, 1% more
    assert not same(want, want[: value.start()] + shifted + want[value.end() :])
