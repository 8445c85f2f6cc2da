"""The findings reference, written from the code: one section per finding kind.

Each section is made of what the kind's class and module hold, so that the documentation
cannot drift from them: the class docstring (the lead, and how it is diagnosed), the module
docstring (its rule, thresholds and their sources, what it needs), the signals its
``Evidence(...)`` calls name, the kinds it can be a consequence of (``caused_by``), and the
causes it weighs and the fixes it proposes, taken from its ``explain`` run on a finding with
no evidence (so every cause shows its base rate; a real run's numbers fill the fixes in).
``docs/findings.md`` holds it between :data:`START` and :data:`END` (``python -m
gradoc.report.reference docs/findings.md`` rewrites it there, a test checks it is current),
and the docs site writes it afresh at every build (``docs/hooks.py``).
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
from pathlib import Path

from ..detect import synthetic
from ..detect.finding import FAMILIES, Finding
from ..diagnose import diagnose
from ..findings import REGISTRY, FindingKind

START = "<!-- findings-reference: written by gradoc.report.reference -->"
END = "<!-- end of the findings reference -->"


def _module(kind: FindingKind) -> str:
    return type(kind).__module__


def _doc(kind: FindingKind) -> tuple[str, str]:
    """The kind's lead (its class docstring's first paragraph, on one line) and the rest."""
    first, _, rest = inspect.cleandoc(type(kind).__doc__ or "").partition("\n\n")
    return " ".join(first.split()), rest.strip()


def _rule(kind: FindingKind) -> str:
    """Its module docstring, less a first paragraph that names the kind (``dead_units: ...``)."""
    doc = inspect.cleandoc(sys.modules[_module(kind)].__doc__ or "")
    first, _, rest = doc.partition("\n\n")
    return rest.strip() if first.partition(":")[0].strip() == kind.name else doc


def evidence_signals(kind: FindingKind) -> list[str]:
    """The signals a kind's findings show as evidence: the names the ``Evidence(...)`` calls
    of its module give, read from its source (a value only known in a run reads ``…``)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(inspect.getsource(sys.modules[_module(kind)]))):
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


def _sentence(text: str) -> str:
    """The first sentence of ``text``."""
    found = re.match(r".*?\.(?=\s|$)", text)
    return found.group(0) if found else text


def explained(kind: FindingKind) -> Finding:
    """The diagnosis of ``kind`` for a finding with no evidence: its causes and fixes."""
    history = synthetic(loss=[1.0] * 20, grad_norms={"0.weight": [1.0] * 20})
    finding = Finding(
        kind=kind.name,
        severity="warning",
        step=5,
        layer="0",
        summary=kind.name,
        details=kind.example_details or {},
    )
    [story] = diagnose(history, [finding])
    return story


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("[", "\\[").replace("\n", " ")


def section(kind: FindingKind, story: Finding) -> str:
    """The reference section of one finding kind, in Markdown (``story``: its diagnosis for a
    finding with no evidence, :func:`explained`)."""
    lead, more = _doc(kind)
    lines = [f"## `{kind.name}` {{#{kind.name}}}", "", lead[:1].upper() + lead[1:], ""]
    lines += [f"**Rule** (`{_module(kind)}`)", "", _rule(kind), ""]
    signals = evidence_signals(kind)
    if signals:
        lines += ["**Evidence it shows**", "", *(f"- {_cell(name)}" for name in signals), ""]
    if more:
        lines += ["**Diagnosis**", "", more, ""]
    if kind.name == "nonfinite":
        lines += _mechanisms()
    lines += [f"**Harm** {kind.harm}", ""]
    if kind.statistic:
        lines += [
            "A statistic, not harm seen: on a run whose one objective improved clearly "
            "(the median loss of its last quarter at most half that of its first 10% of steps) "
            "with nothing non-finite and no loss-trend finding beside it, it is information, "
            "with that reason (`gradoc.findings.check_all`).",
            "",
        ]
    if kind.judges_trend:
        lines += [
            "Judges the loss's trend: with several objectives, only those whose kind "
            "of training expects the loss to fall (supervised), each by its own loss "
            "(`gradoc.detect.training`).",
            "",
        ]
    if kind.caused_by:
        links = ", ".join(f"[`{k}`](#{k})" for k in kind.caused_by)
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
        if kind.considers_zero_init:
            lines += ["", "Weights that start at zero are weighed as a cause as well."]
        lines.append("")
    if story.fixes:
        lines += ["**Fixes** (a run's own numbers fill them in)", ""]
        lines += [f"- *{fix.horizon}*: {fix.action}" for fix in story.fixes]  # by horizon
        lines.append("")
    return "\n".join(lines)


def _mechanisms() -> list[str]:
    """The numerical mechanisms a located birth is explained by (``locate.mechanism``), with
    the evidence each shows and the idiom its fix writes (``fix.idiom``)."""
    from ..fix.idiom import WRITERS
    from ..locate.mechanism import CATALOGUE

    lines = [
        "**Why it was born** (`gradoc.locate.mechanism`): the op that made the value, the ops "
        "that made its operands and their values on the failing step name the mechanism, in "
        "the run's numbers (the origin's `mechanism`); the fix is its stable idiom, which "
        "`gradoc fix` writes in place of the located expression where the line holds its "
        "shape (\u2713 below).",
        "",
        "| mechanism | kind | what happened | evidence | the idiom | edit |",
        "|---|---|---|---|---|---|",
    ]
    for name, m in CATALOGUE.items():
        edit = "\u2713" if name in WRITERS else "-"
        lines.append(
            f"| `{name}` | {m.kind} | {_cell(m.what)} | {_cell(m.evidence)} | "
            f"{_cell(m.idiom)} | {edit} |"
        )
    return [*lines, ""]


def reference() -> str:
    """Every finding kind's section, in the registry's order, after a table of them."""
    head = [
        "| kind | what it means | root-cause families weighed |",
        "|---|---|---|",
    ]
    stories = {kind: explained(kind) for kind in REGISTRY.values()}
    for kind, story in stories.items():
        lead = _sentence(_doc(kind)[0])
        families = sorted({h.family.value for h in story.hypotheses})
        head.append(
            f"| [`{kind.name}`](#{kind.name}) | {_cell(lead)} | "
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
