"""The findings reference, written from the code: one section per finding kind.

Each section is made of what the code itself holds, so that the documentation cannot drift
from it: the kind's detector docstring (its rule, thresholds and their sources, what it
needs), the kinds it can be a consequence of (its diagnosis module's ``CAUSED_BY``), and
the causes it weighs and the fixes it proposes, taken from its diagnosis module run on a
finding with no evidence (so every cause shows its base rate; a real run's numbers fill
the fixes in). ``docs/findings.md`` holds it between :data:`START` and :data:`END`
(``python -m gradoc.report.reference docs/findings.md`` rewrites it there, a test checks it
is current), and the docs site writes it afresh at every build (``docs/hooks.py``).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from ..detect import DETECTORS, padding, synthetic
from ..detect.finding import FAMILIES, Finding, Kind
from ..diagnose import REGISTRY, diagnose

START = "<!-- findings-reference: written by gradoc.report.reference -->"
END = "<!-- end of the findings reference -->"

EMITTED_BY: dict[Kind, str] = {
    Kind.PADDING_LEAK: padding.__name__,
    Kind.LOSS_INCLUDES_PADDING: padding.__name__,
    Kind.LENGTH_ANOMALY: padding.__name__,
    Kind.PADDING_WASTE: padding.__name__,
    Kind.LOG_INCOMPLETE: "gradoc.report.json",
}
"""The kinds no entry of ``detect.DETECTORS`` is named after: the module that emits them."""

EXAMPLE_DETAILS: dict[Kind, dict[str, Any]] = {
    Kind.LOSS_BLOWUP: {"peak_ratio": 100.0},
    Kind.ACCUMULATING_GRADIENTS: {"kept": 8, "checked": 8},
    Kind.FROZEN_PARAMETERS: {"share": 0.9},
}
"""The details a kind's diagnosis reads unconditionally, for the finding with no evidence."""


def source_of(kind: Kind) -> str:
    """The module that emits ``kind``: its detector, or what ``EMITTED_BY`` says."""
    if kind in DETECTORS:
        return DETECTORS[kind].__module__
    if kind in EMITTED_BY:
        return EMITTED_BY[kind]
    raise LookupError(f"no detector is known for {kind!r}: add it to EMITTED_BY")


def _doc(module: ModuleType | str) -> str:
    if isinstance(module, str):
        module = importlib.import_module(module)
    return inspect.cleandoc(module.__doc__ or "")


def evidence_signals(module: str) -> list[str]:
    """The signals a module's findings show as evidence: the names its ``Evidence(...)``
    calls give, read from its source (a value only known in a run reads ``…``)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(inspect.getsource(importlib.import_module(module)))):
        if not (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", None) == "Evidence"
            and node.args
        ):
            continue
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            name = first.value
        elif isinstance(first, ast.JoinedStr):
            name = "".join(
                str(v.value) if isinstance(v, ast.Constant) else "…" for v in first.values
            )
        else:
            continue
        if name not in found:
            found.append(name)
    return found


def _split(module: ModuleType | str, kind: Kind) -> tuple[str, str, bool]:
    """A module docstring's first paragraph (on one line, without the kinds it starts by
    naming: ``dead_units: most units...``), the rest, and whether it named ``kind``."""
    doc = _doc(module)
    first, _, rest = doc.partition("\n\n")
    named, colon, said = first.partition(":")
    names = kind.value in named
    if names:
        first = said if colon else ""
    return " ".join(first.split()), rest.strip(), names


def _sentence(text: str) -> str:
    """The first sentence of ``text``."""
    found = re.match(r".*?\.(?=\s|$)", text)
    return found.group(0) if found else text


def explained(kind: Kind) -> Finding:
    """The diagnosis of ``kind`` for a finding with no evidence: its causes and fixes."""
    history = synthetic(loss=[1.0] * 20, grad_norms={"0.weight": [1.0] * 20})
    finding = Finding(
        kind=kind,
        severity="warning",
        step=5,
        layer="0",
        summary=kind.value,
        details=dict(EXAMPLE_DETAILS.get(kind, {})),
    )
    [story] = diagnose(history, [finding])
    return story


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("[", "\\[").replace("\n", " ")


def section(kind: Kind, story: Finding) -> str:
    """The reference section of one finding kind, in Markdown (``story``: its diagnosis for a
    finding with no evidence, :func:`explained`)."""
    module = REGISTRY[kind]
    source = source_of(kind)
    lead, more, _ = _split(module, kind)
    _, rule, named = _split(source, kind)
    lines = [f"## `{kind.value}` {{#{kind.value}}}", "", lead[:1].upper() + lead[1:], ""]
    lines += [f"**Rule** (`{source}`)", "", rule if named else _doc(source), ""]
    signals = evidence_signals(source)
    if signals:
        lines += ["**Evidence it shows**", "", *(f"- {_cell(name)}" for name in signals), ""]
    if more:
        lines += ["**Diagnosis**", "", more, ""]
    if module.CAUSED_BY:
        links = ", ".join(f"[`{k}`](#{k})" for k in module.CAUSED_BY)
        lines += [
            f"**Can be a consequence of** {links}: when one of these began at or before it, "
            "the two are one story, headlined by the cause.",
            "",
        ]
    if story.hypotheses:
        lines += [
            "**Causes weighed** (the base rate orders causes no evidence separates; a run's "
            "signs add to it or take from it)",
            "",
            "| cause | family | base | the check that verifies it |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {_cell(h.cause)} | `{h.family.value}` | {h.base:g} | {_cell(h.check)} |"
            for h in story.hypotheses
        ]
        if module.CONSIDERS_ZERO_INIT:
            lines += ["", "Weights that start at zero are weighed as a cause as well."]
        lines.append("")
    if story.fixes:
        lines += ["**Fixes** (a run's own numbers fill them in)", ""]
        lines += [f"- *{fix.horizon}*: {fix.action}" for fix in story.fixes]  # by horizon
        lines.append("")
    return "\n".join(lines)


def reference() -> str:
    """Every finding kind's section, in the registry's order, after a table of them."""
    head = [
        "| kind | what it means | root-cause families weighed |",
        "|---|---|---|",
    ]
    stories = {kind: explained(kind) for kind in REGISTRY}
    for kind, story in stories.items():
        lead = _sentence(_split(REGISTRY[kind], kind)[0])
        families = sorted({h.family.value for h in story.hypotheses})
        head.append(
            f"| [`{kind.value}`](#{kind.value}) | {_cell(lead)} | "
            + (", ".join(f"`{f}`" for f in families) or "-")
            + " |"
        )
    legend = ", ".join(f"`{f.value}` ({text})" for f, text in FAMILIES.items())
    sections = [section(kind, story) for kind, story in stories.items()]
    return "\n".join([*head, "", f"Families: {legend}.", "", *sections])


def inserted(page: str) -> str:
    """``page`` with the reference between :data:`START` and :data:`END` written afresh."""
    head, start, rest = page.partition(START)
    _, end, tail = rest.partition(END)
    if not start or not end:
        raise ValueError(f"the page has no {START!r} ... {END!r} markers")
    return f"{head}{START}\n\n{reference()}\n{END}{tail}"


if __name__ == "__main__":
    for name in sys.argv[1:]:
        path = Path(name)
        path.write_text(inserted(path.read_text()))
