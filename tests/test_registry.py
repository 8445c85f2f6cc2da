"""Every finding kind a detector or a locator can emit has its diagnosis module, and no
module of the diagnosis reads another module's words.

The kinds are found in the source (``Kind.X`` where a ``Finding`` is made), so a new
detector that emits a kind without a diagnosis fails here rather than shipping
undiagnosed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import gradoc
from gradoc.detect import synthetic
from gradoc.detect.finding import Finding, Kind
from gradoc.diagnose import CAUSES, REGISTRY, diagnose
from gradoc.diagnose.registry import MODULES

ROOT = Path(gradoc.__file__).parent


def emitted_kinds() -> set[Kind]:
    """``Kind.X`` passed as ``kind=`` to a ``Finding`` anywhere in the package."""
    found = set()
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Finding":
                for kw in node.keywords:
                    if kw.arg == "kind" and isinstance(kw.value, ast.Attribute):
                        found.add(Kind[kw.value.attr])
    return found


def test_every_emitted_kind_has_a_diagnosis_module() -> None:
    emitted = emitted_kinds()
    assert Kind.ACCUMULATING_GRADIENTS in emitted and Kind.NONFINITE in emitted
    assert emitted <= set(REGISTRY), sorted(emitted - set(REGISTRY))
    assert set(Kind) == set(REGISTRY), "a kind of the vocabulary without its diagnosis"


def test_each_module_is_one_kind_with_its_causes() -> None:
    assert len({m.KIND for m in MODULES}) == len(MODULES)
    for m in MODULES:
        assert all(isinstance(k, Kind) for k in m.CAUSED_BY), m.__name__
        assert m.KIND not in m.CAUSED_BY
    assert CAUSES[Kind.LOSS_PLATEAU][0] == Kind.ACCUMULATING_GRADIENTS


def test_no_file_of_the_diagnosis_is_over_400_lines() -> None:
    for path in (ROOT / "diagnose").glob("*.py"):
        assert len(path.read_text().splitlines()) <= 400, path.name


TEXT_FIELDS = (
    "summary",
    "signal",
    "cause",
    "why",
    "action",
    "claim",
    "root_cause",
    "message",
    "reason",
)


def test_no_module_matches_another_modules_text() -> None:
    """A diagnosis reasons with typed facts (``details``, ``Kind``, ``Sign``), never with
    the words another module wrote: a test of a text field with startswith / endswith /
    ``in`` / ``==`` against a string literal fails here."""
    bad = []
    for path in ROOT.rglob("*.py"):
        if path.parts[-2] not in ("diagnose", "detect", "report", "locate"):
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            text = ast.unparse(node) if isinstance(node, (ast.Call, ast.Compare)) else ""
            if not re.search(r"\b(" + "|".join(TEXT_FIELDS) + r")\b", text):
                continue
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") in (
                "startswith",
                "endswith",
            ):
                bad.append(f"{path.name}:{node.lineno}: {text}")
            if isinstance(node, ast.Compare) and any(
                isinstance(c, ast.Constant) and isinstance(c.value, str) for c in node.comparators
            ):
                bad.append(f"{path.name}:{node.lineno}: {text}")
    assert not bad, bad


def _finding(kind: Kind, step: int) -> Finding:
    return Finding(kind=kind, severity="warning", step=step, layer=None, summary=str(kind))


def test_a_hypothesis_without_a_seen_sign_is_never_called_confirmed() -> None:
    """Absence is not support: a plateau on a run that shows none of its causes gets its
    most common cause, said to be unconfirmed."""
    h = synthetic(loss=[1.0] * 150)
    (story,) = diagnose(h, [_finding(Kind.LOSS_PLATEAU, 100)])
    for hyp in story.hypotheses:
        seen = [s for s in hyp.signs if s.state == "seen"]
        assert hyp.confirmed == bool(seen)
        assert hyp.score == hyp.base + sum(s.weight for s in seen) - sum(
            s.weight for s in hyp.signs if s.state == "contradicted"
        )


def test_a_claim_about_the_start_is_checked_against_the_start() -> None:
    """Units found dead at step 30 after being alive at step 20: the initialisation is
    contradicted by the samples, a gradient jump before the death supports the rate."""
    h = synthetic(loss=[2.0] * 40, grad_norms={"a.weight": [1.0] * 25 + [40.0] + [1.0] * 14})
    f = _finding(Kind.DEAD_UNITS, 30)
    f.layer = "a"
    f.details = {"first_sample": 10, "alive_until": 20}
    (story,) = diagnose(h, [f])
    assert story.root_cause_family == "learning_rate", story.root_cause
    init = next(x for x in story.hypotheses if x.family == "initialization")
    assert [s.step for s in init.signs if s.state == "contradicted"] == [20]
