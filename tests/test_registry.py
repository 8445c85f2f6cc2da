"""A finding kind is one class in one module: what finds it, what causes it and how it is
explained live together, one list registers them, and everything else reads the classes.

The kinds a ``Finding`` is made with anywhere in the package are found in the source
(``kind="x"``), so a rule that emits a kind nobody registered fails here rather than
shipping undiagnosed; and a throwaway kind, written as a new module in a temporary folder,
reaches the registry, the report and the findings reference with no other edit.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import gradoc
from gradoc.detect import synthetic
from gradoc.detect.finding import Finding
from gradoc.diagnose import causes, diagnose
from gradoc.findings import KINDS, REGISTRY, FindingKind, check_all, register, unregister
from gradoc.findings.loss_plateau import Plateau
from gradoc.report import reference
from gradoc.report.json import write_report

ROOT = Path(gradoc.__file__).parent


def emitted_kinds() -> set[str]:
    """The kinds passed as a string literal ``kind="x"`` to a ``Finding`` in the package."""
    found = set()
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Finding":
                for kw in node.keywords:
                    if kw.arg == "kind" and isinstance(kw.value, ast.Constant):
                        found.add(kw.value.value)
    return found


def test_every_emitted_kind_is_registered() -> None:
    emitted = emitted_kinds()
    assert {"padding_leak", "loss_divergence"} <= emitted  # the walk sees them
    assert emitted <= set(REGISTRY), sorted(emitted - set(REGISTRY))


def test_each_kind_is_one_class_in_its_own_module_with_its_causes() -> None:
    assert [k.name for k in KINDS] == list(REGISTRY)
    for kind in KINDS:
        assert kind.__module__ == f"gradoc.findings.{kind.name}", kind
        defined = [
            c
            for _, c in inspect.getmembers(sys.modules[kind.__module__], inspect.isclass)
            if issubclass(c, FindingKind) and c.__module__ == kind.__module__
        ]
        assert defined == [kind], f"{kind.__module__} defines {defined}"
        assert kind.name not in kind.caused_by
        assert set(kind.caused_by) <= set(REGISTRY), kind.name
        assert type(kind).__doc__ or kind.__doc__, f"{kind.name} has no lead"
    assert causes("loss_plateau")[0] == "accumulating_gradients"


def test_no_class_is_over_300_lines() -> None:
    """A class that does one thing reads in one sitting (the step driver coordinates its
    loss reader, clipping, transfers and checks rather than holding them)."""
    long = [
        f"{path.relative_to(ROOT)}: {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in ROOT.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and (node.end_lineno or 0) - node.lineno >= 300
    ]
    assert not long, long


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
    "source",
)


def test_no_module_matches_another_modules_text() -> None:
    """A diagnosis reasons with typed facts (``details``, kinds, ``Sign``), never with the
    words another module wrote: a test of a text field with startswith / endswith / ``in``
    / ``==`` against a string literal fails here."""
    bad = []
    for path in ROOT.rglob("*.py"):
        if path.parts[-2] not in ("findings", "diagnose", "detect", "report", "locate"):
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


def _finding(kind: str, step: int) -> Finding:
    return Finding(kind=kind, severity="warning", step=step, layer=None, summary=kind)


def test_a_hypothesis_without_a_seen_sign_is_never_called_confirmed() -> None:
    """Absence is not support: a plateau on a run that shows none of its causes gets its
    most common cause, said to be unconfirmed."""
    h = synthetic(loss=[1.0] * 150)
    plateau = _finding("loss_plateau", 100)
    plateau.details = Plateau(early_loss=1.0, late_loss=1.0, gain=0.0)
    (story,) = diagnose(h, [plateau])
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
    f = _finding("dead_units", 30)
    f.layer = "a"
    f.details = {"first_sample": 10, "alive_until": 20}
    (story,) = diagnose(h, [f])
    assert story.root_cause_family == "learning_rate", story.root_cause
    init = next(x for x in story.hypotheses if x.family == "initialization")
    assert [s.step for s in init.signs if s.state == "contradicted"] == [20]


# -- a throwaway kind, end to end, with no other edit ----------------------------------------

THROWAWAY = '''
"""steady_loss: the loss never moved by more than ``TOLERANCE`` of its first value.

Rule: the first and last recorded losses differ by less than ``TOLERANCE`` (1e-3) of the
first, over at least ``MIN_STEPS`` (5) steps: a throwaway rule, written by a test.
"""

from __future__ import annotations

from dataclasses import dataclass

from gradoc.detect.finding import Evidence, Family, Finding, Fix, Horizon, Hypothesis, Weight
from gradoc.detect.history import History
from gradoc.findings.facts import Facts
from gradoc.findings.kind import Details, FindingKind

TOLERANCE = 1e-3
MIN_STEPS = 5


@dataclass(slots=True)
class Steady(Details):
    """Where the loss stood and for how long."""

    level: float
    steps: int


class SteadyLoss(FindingKind):
    """The loss stands still from the first step to the last."""

    name = "steady_loss"
    caused_by = ("tiny_updates",)
    example_details = Steady(level=1.0, steps=8)

    def check(self, h: History) -> list[Finding]:
        losses = h.loss.values
        if len(losses) < MIN_STEPS or abs(losses[-1] - losses[0]) > TOLERANCE * abs(losses[0]):
            return []
        return [
            Finding(
                kind=self.name,
                severity="warning",
                step=h.loss.steps[0],
                layer=None,
                summary=f"the loss stood at {losses[0]:.3g} for {len(losses)} steps",
                evidence=[Evidence("steps without a change in the loss", len(losses))],
                details=Steady(losses[0], len(losses)),
            )
        ]

    def explain(self, f: Finding, h: History, facts: Facts) -> list[Hypothesis]:
        f.symptom = "the loss stands still"
        frozen = Hypothesis(
            Family.LOOP,
            "optimizer.step() is never reached with these parameters",
            "print the parameters the optimizer holds",
            base=0.3,
        )
        d = Steady.of(f.details)
        frozen.seen(f"the loss stood at {d.level:.3g} for {d.steps} steps", Weight.MODERATE)
        f.fixes.append(Fix(Horizon.IMMEDIATE, "hand the model's parameters to the optimizer"))
        return [frozen]
'''


@pytest.fixture
def throwaway(tmp_path: Path) -> Iterator[type[FindingKind]]:
    """The throwaway kind's module, written to a temporary folder, imported and registered."""
    path = tmp_path / "steady_loss.py"
    path.write_text(textwrap.dedent(THROWAWAY))
    spec = importlib.util.spec_from_file_location("steady_loss", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["steady_loss"] = module
    spec.loader.exec_module(module)
    register(module.SteadyLoss)
    try:
        yield module.SteadyLoss
    finally:
        unregister("steady_loss")
        del sys.modules["steady_loss"]


def test_a_new_kind_reaches_the_registry_the_report_and_the_reference(
    throwaway: type[FindingKind], tmp_path: Path
) -> None:
    assert isinstance(REGISTRY["steady_loss"], throwaway)
    # a run whose optimizer holds no parameter of the model: the loss never moves
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    other = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([other], lr=0.1)
    x = torch.randn(16, 4)
    run = gradoc.watch(model, opt, out=tmp_path / "run")
    for _ in range(8):
        opt.zero_grad()
        (model(x).pow(2).mean() + 0 * other.sum()).backward()
        opt.step()
    run.close()
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    (found,) = [f for f in report["findings"] if f["kind"] == "steady_loss"]
    assert found["summary"].startswith("the loss stood at")
    assert list(found["details"]) == ["level", "steps"] and found["details"]["steps"] == 8
    assert found["hypotheses"][0]["signs"][0]["claim"].endswith("for 8 steps")
    assert (
        found["hypotheses"][0]["cause"] == "optimizer.step() is never reached with these parameters"
    )
    assert found["fixes"] == [
        {"horizon": "immediate", "action": "hand the model's parameters to the optimizer"}
    ]
    assert "steady_loss" in (tmp_path / "run" / "report.html").read_text()
    # written again from the log, as gradoc report does
    again = write_report(tmp_path / "run", html=False)
    assert [f.kind for f in again.findings] == [f["kind"] for f in report["findings"]]
    steady = next(f for f in again.findings if f.kind == "steady_loss")
    steady_details = sys.modules["steady_loss"].Steady
    assert steady_details.of(steady.details).steps == 8  # typed again, read back from JSON
    # its cause folds into its story: tiny updates at the same step head it
    tiny = _finding("tiny_updates", 0)
    steady = _finding("steady_loss", 0)
    steady.details = {"level": 1.0, "steps": 8}  # as report.json holds them
    (story,) = diagnose(synthetic(loss=[1.0] * 8), [steady, tiny])
    assert story.kind == "tiny_updates" and story.related[0].kind == "steady_loss"
    # the reference: a row, and a section with its rule, evidence, cause and fix
    text = reference.reference()
    assert "| [`steady_loss`](#steady_loss) | The loss stands still from the first step" in text
    section = text[text.index("## `steady_loss`") :]
    assert "**Rule** (`steady_loss`)" in section and "``TOLERANCE`` (1e-3)" in section
    assert "- steps without a change in the loss" in section
    assert "[`tiny_updates`](#tiny_updates)" in section
    assert "optimizer.step() is never reached" in section
    assert "hand the model's parameters to the optimizer" in section


def test_the_throwaway_kind_leaves_with_its_test(throwaway: type[FindingKind]) -> None:
    assert "steady_loss" in REGISTRY
    unregister("steady_loss")
    assert "steady_loss" not in REGISTRY
    assert all(f.kind != "steady_loss" for f in check_all(synthetic(loss=[1.0] * 8)))


def test_a_kind_whose_cause_is_unknown_or_whose_name_is_taken_is_refused() -> None:
    class Twin(FindingKind):
        name = "nonfinite"

    class Orphan(FindingKind):
        name = "orphan"
        caused_by = ("no_such_kind",)

    with pytest.raises(ValueError, match="two finding kinds are named 'nonfinite'"):
        register(Twin)
    with pytest.raises(ValueError, match="no_such_kind"):
        register(Orphan)
    assert type(REGISTRY["nonfinite"]).__name__ == "Nonfinite" and "orphan" not in REGISTRY


def test_every_kinds_details_read_back_from_their_json() -> None:
    """A kind's typed details become report.json's ``details`` and come back the same: a
    field added to the class without its key in the JSON (or the reverse) fails here."""
    from gradoc.findings.large_updates import AdamRate
    from gradoc.findings.loss_includes_padding import PaddingScored
    from gradoc.findings.nonfinite import NonfiniteFacts
    from gradoc.findings.poor_initialization import ChanceInit, Drift

    examples = [k.example_details for k in REGISTRY.values() if k.example_details is not None]
    assert len(examples) >= 6
    for details in [
        *examples,
        AdamRate(lr=0.1, weight_rms=0.02, ratio=5.0),
        ChanceInit(start_loss=35.0, chance=4.17, classes=65),
        Drift(factor_per_layer=3.0, grows=True),
        NonfiniteFacts(grew_before={"loss": 12.0}),
        NonfiniteFacts(printed="loss nan"),
        PaddingScored(model_loss=True),
    ]:
        assert details is not None
        text = json.dumps(details.to_json())
        back = type(details).of(json.loads(text))
        assert json.dumps(back.to_json()) == text, text  # NaN included
    # a kind with several rules tells their details apart by the rule
    init = Finding(kind="poor_initialization", severity="warning", step=0, layer=None, summary="")
    init.details = Drift(factor_per_layer=3.0, grows=True).to_json()
    assert ChanceInit.in_(init) is None and Drift.in_(init) == Drift(
        factor_per_layer=3.0, grows=True
    )


def test_a_kind_makes_its_findings_with_every_field_of_a_finding() -> None:
    """``FindingKind.found`` takes every field of ``Finding`` (``Told`` lists those beyond
    the head): a field added to ``Finding`` and not to ``Told`` could not be told."""
    from dataclasses import fields

    from gradoc.detect.finding import Evidence, Finding, Told
    from gradoc.findings import REGISTRY

    head = {"kind", "severity", "step", "layer", "summary"}
    assert set(Told.__annotations__) == {f.name for f in fields(Finding)} - head
    kind = REGISTRY["loss_spike"]
    f = kind.found(severity="warning", step=3, summary="s", evidence=[Evidence("x", 1.0)])
    assert (f.kind, f.severity, f.step, f.layer, f.summary) == (
        "loss_spike",
        "warning",
        3,
        None,
        "s",
    )
    assert [e.value for e in f.evidence] == [1.0]
