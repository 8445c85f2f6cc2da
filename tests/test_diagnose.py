"""The diagnosis: merged stories, hypotheses with the run's evidence, rendered output."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

import gradoc
from gradoc.detect import Finding
from gradoc.detect.finding import FAMILIES, Origin
from gradoc.diagnose import merge, order
from gradoc.findings import REGISTRY
from gradoc.findings.poor_initialization import ChanceInit
from gradoc.report import Report, build_report, print_summary, to_json_text
from tests.scenarios import HEALTHY, PATHOLOGIES


def _finding(kind: str, step: int, severity: str = "warning") -> Finding:
    return Finding(kind=kind, severity=severity, step=step, layer=None, summary=f"{kind} at {step}")  # type: ignore[arg-type]


def test_consequences_fold_into_their_cause_on_the_timeline() -> None:
    stories = order(
        merge(
            [
                _finding("loss_divergence", 3, "error"),
                _finding("exploding_gradients", 5),
                _finding("nonfinite", 8, "error"),
                _finding("loss_spike", 1),
            ]
        )
    )
    # the divergence began before the explosion: the explosion cannot explain it
    assert [f.kind for f in stories] == ["loss_divergence", "exploding_gradients", "loss_spike"]
    explosion = stories[1]
    assert {r.kind for r in explosion.related} == {"nonfinite"}
    assert explosion.severity == "error"  # a folded error keeps the story an error


def test_a_nan_born_in_user_code_is_a_root_and_what_follows_is_its_consequence() -> None:
    nan = _finding("nonfinite", 15, "error")
    nan.origin = Origin(phase="backward", step=4, op="SqrtBackward0", file="t.py", line=3)
    stories = order(
        merge(
            [
                _finding("loss_divergence", 16, "error"),
                _finding("exploding_gradients", 2),
                nan,
                _finding("large_updates", 50),
            ]
        )
    )
    assert [f.kind for f in stories] == ["nonfinite", "exploding_gradients"]
    assert {r.kind for r in stories[0].related} == {"loss_divergence", "large_updates"}


def test_a_finding_with_no_cause_stands_alone() -> None:
    (f,) = merge([_finding("nonfinite", 4, "error")])
    assert f.kind == "nonfinite" and f.related == []


def test_every_finding_ends_in_exactly_one_story_never_before_its_cause() -> None:
    import random

    kinds = sorted(REGISTRY)
    rng = random.Random(0)
    for _ in range(500):
        found = [
            _finding(rng.choice(kinds), rng.randrange(50), rng.choice(["error", "warning"]))
            for _ in range(rng.randrange(1, 8))
        ]
        labels = [(f.kind, f.step) for f in found]
        stories = merge(found)
        seen = [(f.kind, f.step) for f in stories]
        seen += [(r.kind, r.step) for f in stories for r in f.related]
        assert sorted(seen) == sorted(labels)  # nothing lost, nothing twice
        for f in stories:
            # causes come first; a set-up (a sign, a mode) was there from the first step,
            # whatever step its rule saw it at
            assert REGISTRY[f.kind].setup or all(r.step >= f.step for r in f.related)


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict]]:
    out = {}
    for name, (scenario, _, _) in PATHOLOGIES.items():
        run_dir = scenario(tmp_path_factory.mktemp(name) / "run")
        out[name] = (run_dir, build_report(gradoc.open_run(run_dir)))
    return out


def _story(report: dict, kind: str) -> dict:
    return next(
        f
        for f in report["findings"]
        if f["kind"] == kind or kind in {r["kind"] for r in f["related"]}
    )


@pytest.mark.parametrize("name", sorted(PATHOLOGIES))
def test_every_story_is_a_full_diagnosis(name: str, reports: dict) -> None:
    _, kind, _ = PATHOLOGIES[name]
    f = _story(reports[name][1], kind)
    assert f["symptom"] and f["root_cause"] and f["monitoring"]
    assert f["evidence"] and all(
        "value" in e and e["type"] in ("metric", "distribution") for e in f["evidence"]
    )
    assert f["hypotheses"]
    for h in f["hypotheses"]:
        assert set(h) == {
            "cause",
            "family",
            "likelihood",
            "score",
            "support",
            "against",
            "not_observed",
            "signs",
            "check",
        }
        assert h["likelihood"] in ("high", "medium", "low") and h["check"]
        assert h["family"] in FAMILIES
    assert f["root_cause_family"] == f["hypotheses"][0]["family"]
    order = {"high": 0, "medium": 1, "low": 2}
    assert [order[h["likelihood"]] for h in f["hypotheses"]] == sorted(
        order[h["likelihood"]] for h in f["hypotheses"]
    )
    horizons = {fix["horizon"] for fix in f["fixes"]}
    assert "immediate" in horizons and len(horizons) >= 2
    assert f["root_cause"].startswith(f["hypotheses"][0]["cause"])


def test_wrong_diagnoses_are_ruled_out_with_the_runs_numbers(reports: dict) -> None:
    def ruled(name: str, kind: str) -> dict[str, str]:
        return {r["cause"]: r["why"] for r in _story(reports[name][1], kind)["ruled_out"]}

    assert (
        "before any update"
        in ruled("exploding_init", "exploding_gradients")["learning rate too high"]
    )
    why = ruled("vanishing_sigmoid", "vanishing_gradients")[
        "a data or loss problem (nothing to learn)"
    ]
    assert re.search(r"gradient norm \d", why)
    assert "within 50 steps" in ruled("loss_spike", "loss_spike")["loss divergence"]
    assert "ln(4)" in json.dumps(_story(reports["plateau_random_labels"][1], "loss_plateau"))
    assert ruled("plateau_random_labels", "loss_plateau")["dead ReLUs or vanishing gradients"]
    nan = ruled("nonfinite_log", "nonfinite")
    assert set(nan) <= {"exploding gradients", "learning rate too high"}


def test_top_hypotheses_name_the_known_causes(reports: dict) -> None:
    def top(name: str, kind: str) -> str:
        return str(_story(reports[name][1], kind)["hypotheses"][0]["cause"])

    assert "initialisation" in top("exploding_init", "exploding_gradients")
    assert "saturating activations" in top("vanishing_sigmoid", "vanishing_gradients")
    assert "bias" in top("dead_relu", "dead_units")
    assert "bad batch" in top("loss_spike", "loss_spike")
    assert "learning rate too high" in top("divergence_lr", "loss_divergence")
    assert "no learnable relation" in top("plateau_random_labels", "loss_plateau")
    assert "learning rate far too low" in top("tiny_updates", "tiny_updates")


@pytest.mark.parametrize("name", sorted(PATHOLOGIES))
def test_terminal_diagnosis_fits_100_columns(name: str, reports: dict) -> None:
    run_dir, report = reports[name]
    console = Console(width=100, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    with gradoc.open_run(run_dir) as log:
        print_summary(log, Report.from_json(report), console)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 100
    for f in report["findings"]:
        assert f["kind"] in text and "root cause" in text


def test_report_json_is_strict_json(reports: dict) -> None:
    for _, report in reports.values():
        json.loads(to_json_text(report), parse_constant=lambda c: pytest.fail(f"bare {c} in JSON"))


def test_fail_on_exit_codes(reports: dict, tmp_path: Path) -> None:
    def code(run_dir: Path, level: str) -> int:
        return subprocess.run(
            [sys.executable, "-m", "gradoc", "report", str(run_dir), "--fail-on", level],
            capture_output=True,
            timeout=120,
        ).returncode

    error_run = reports["nonfinite_log"][0]
    warning_run = reports["loss_spike"][0]
    assert code(error_run, "error") == 3 and code(error_run, "warning") == 3
    assert code(warning_run, "error") == 0 and code(warning_run, "warning") == 3
    healthy = HEALTHY["frozen_unused"](tmp_path / "healthy")
    assert code(healthy, "warning") == 0


def test_detection_runs_off_the_training_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gradoc.analysis as report_json

    calls = []
    original = report_json.check_all
    monkeypatch.setattr(report_json, "check_all", lambda h: calls.append(1) or original(h))
    import torch

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    run = gradoc.watch(model, opt, out=tmp_path / "run")
    for _ in range(30):
        opt.zero_grad()
        model(torch.randn(8, 4)).pow(2).mean().backward()
        opt.step()
    assert calls == []  # nothing detected while training
    run.close()
    assert calls == [1]  # once, from the finished log


def test_an_adam_rate_as_large_as_the_weights_joins_the_story_it_caused() -> None:
    """A setting, not an event: whatever it began with, the blow-up it caused heads the
    story, and alone it is its own story."""
    setting = _finding("large_updates", 0)
    setting.details = {"rule": "adam_lr", "lr": 0.5, "weight_rms": 0.07, "ratio": 7.0}
    (story,) = order(merge([setting, _finding("loss_blowup", 2, "error")]))
    assert story.kind == "loss_blowup" and {r.kind for r in story.related} == {"large_updates"}
    alone = _finding("large_updates", 74)
    alone.details = dict(setting.details)
    assert [f.kind for f in merge([alone])] == ["large_updates"]


def test_a_late_nan_is_not_folded_into_a_blowup_that_came_back_long_before() -> None:
    """A loss that jumped at step 2 and was back by step 21, then NaN at step 37,686: two
    stories, and the NaN, which lasted to the end, is the headline. A NaN while the loss
    was still up (or soon after) is still the blow-up's."""
    from gradoc.findings.loss_blowup import Blowup

    def blowup() -> Finding:
        f = _finding("loss_blowup", 2, "error")
        f.details = Blowup(
            start_loss=0.69,
            peak_loss=9.5,
            peak_step=3,
            peak_ratio=13.8,
            came_back_at=21,
            end_loss=0.3,
            per_sample=False,
        )
        return f

    late = order(merge([blowup(), _finding("nonfinite", 37_686, "error")]))
    assert [(s.kind, s.step) for s in late] == [("nonfinite", 37_686), ("loss_blowup", 2)]
    assert not late[0].related and not late[1].related
    (soon,) = order(merge([blowup(), _finding("nonfinite", 40, "error")]))
    assert soon.kind == "loss_blowup" and [r.kind for r in soon.related] == ["nonfinite"]
    # a blow-up that never came back explains a NaN whenever it came
    lasting = blowup()
    lasting.details = {**Blowup.of(lasting.details).to_json(), "came_back_at": None}
    (story,) = order(merge([lasting, _finding("nonfinite", 37_686, "error")]))
    assert story.kind == "loss_blowup"


def test_a_loss_at_init_far_above_chance_heads_the_explosion_it_starts() -> None:
    """nanoGPT with init std 1.0: loss 35 against ln 65, gradient norm 2,200 at step 0."""
    init = _finding("poor_initialization", 0)
    init.details = ChanceInit(start_loss=35.0, chance=math.log(65), classes=65)
    (story,) = order(merge([_finding("exploding_gradients", 0, "error"), init]))
    assert story.kind == "poor_initialization" and story.severity == "error"
    assert {r.kind for r in story.related} == {"exploding_gradients"}
    drift = _finding("poor_initialization", 0)  # activations growing layer by layer
    drift.details = {"rule": "drift", "factor_per_layer": 3.0, "grows": True}  # from JSON
    (story,) = order(merge([_finding("exploding_gradients", 0, "error"), drift]))
    assert story.kind == "exploding_gradients"


def test_the_programs_own_clipping_is_a_signal_and_not_advised_again() -> None:
    """A clip that bit on most steps: the raw gradients were above it; the fix is not
    "add clipping"."""
    from gradoc.detect import History, synthetic
    from gradoc.diagnose import diagnose
    from gradoc.store import Series

    h: History = synthetic(loss=[2.0] * 5 + [50.0] * 45, grad_norms={"a.weight": [5.0] * 50})
    h.clip_norm = Series(list(range(50)), [5.0] * 40 + [0.5] * 10)
    h.clip_max = Series(list(range(50)), [1.0] * 50)
    (story,) = diagnose(h, [_finding("large_updates", 5)])
    lr = next(x.to_json() for x in story.hypotheses if x.family == "learning_rate")
    assert any("bit on 40 of 50 steps" in s for s in lr["support"])
    signals = {e.signal: e.value for e in story.evidence}
    assert signals["steps the program's gradient clip at 1 bit"] == "40 of 50"
    assert not any("torch.nn.utils.clip_grad_norm_" in f.action for f in story.fixes)


def test_a_set_up_heads_what_it_caused_whenever_its_rule_saw_it() -> None:
    """A KL term with its sign flipped is there from the first step: the gradients that grow
    from step 10 are its consequence, though the loss stays below 0 only from step 33; and a
    generator left in eval() heads the game it unbalanced, though eval_mode is information."""
    unbounded, exploding = (
        _finding("loss_unbounded", 33, "error"),
        _finding("exploding_gradients", 10, "error"),
    )
    (story,) = merge([exploding, unbounded])
    assert story.kind == "loss_unbounded"
    assert [r.kind for r in story.related] == ["exploding_gradients"]
    (game,) = merge(
        [_finding("adversarial_imbalance", 40, "warning"), _finding("eval_mode", 0, "info")]
    )
    assert (game.kind, game.severity) == ("eval_mode", "warning")


def test_a_first_update_under_a_warm_up_is_no_evidence_against_the_learning_rate() -> None:
    """A warm-up's first update is tiny by design: made at a fiftieth of the rate the loss blew
    up at, it says nothing of that rate (issue 46, item 5). The same tiny first update at the
    rate of the blow-up does count against it."""
    from dataclasses import replace

    from gradoc.detect.history import synthetic
    from gradoc.diagnose import diagnose
    from gradoc.findings import check_all
    from gradoc.store import Series

    n = 60
    steps = list(range(n))
    loss = [2.0] * 10 + [2.1, 5.0, 30.0, 25.0, 28.0] + [26.0] * (n - 15)  # blows up at 12

    def lr_signs(rates: list[float]) -> list[str]:
        h = synthetic(
            loss=loss,
            grad_norms={"fc.weight": [1.0] * n},
            param_stats={  # an update the size of its rate, as SGD's or Adam's is
                "fc.weight": {"weight_norm": [1.0] * n, "update_norm": [0.1 * r for r in rates]}
            },
        )
        run = replace(h, lr=Series(steps, rates))
        top = next(f for f in diagnose(run, check_all(run)) if f.kind == "loss_blowup")
        lr = next(x for x in top.hypotheses if x.family.value == "learning_rate")
        return [s.state.value for s in lr.signs if "update" in s.claim]

    warm_up = [0.04 * min(1.0, (s + 1) / 20) for s in steps]  # 0.002 at the first step
    assert "contradicted" not in lr_signs(warm_up)
    assert "contradicted" in lr_signs([0.002] * n)


def test_outputs_not_watched_are_no_evidence_that_no_layer_was_dead() -> None:
    """Inside a torch.compile'd model no per-module hook runs: a plateau there rules out no
    dead or saturated layer, and credits no data problem for their absence (issue 46, item 5)."""
    from dataclasses import replace

    from gradoc.detect.history import synthetic
    from gradoc.diagnose import diagnose
    from gradoc.findings import check_all

    n = 200
    seen = synthetic(
        loss=[2.0 + 0.01 * ((-1) ** s) for s in range(n)],
        grad_norms={"fc.weight": [1.0] * n},
        acts={"relu": {"zero_frac": [0.1] * 20}},
        act_steps=list(range(0, n, 10)),
        module_types={"relu": "ReLU"},
    )
    compiled = replace(seen, act_stats={}, meta=replace(seen.meta, compiled=True))

    def blocked(h: object) -> tuple[list[str], list[str]]:
        (top,) = [f for f in diagnose(h, check_all(h)) if f.kind == "loss_plateau"]  # type: ignore[arg-type]
        hyp = next(x for x in top.hypotheses if "dead" in x.cause or "saturat" in x.cause)
        return [s.state.value for s in hyp.signs], [r.cause for r in top.ruled_out]

    states, ruled = blocked(seen)
    assert "contradicted" in states and any("dead ReLUs" in c for c in ruled)
    states, ruled = blocked(compiled)
    assert "contradicted" not in states and not any("dead ReLUs" in c for c in ruled)


@pytest.mark.parametrize(
    ("optimizer", "lr", "decay", "state"),
    [
        ("SGD", 0.1, 2.0, "seen"),  # 2.0 where 2e-4 was meant: the decay pins the weights
        ("Adam", 0.01, 0.5, "seen"),  # a GCN's coupled decay at 1000x
        ("AdamW", 0.1, 0.1, "contradicted"),  # nanoGPT's usual decay at a rate 100x too high
    ],
)
def test_a_decay_is_judged_by_its_own_setting_not_by_the_rate_it_is_multiplied_by(
    optimizer: str, lr: float, decay: float, state: str
) -> None:
    """``lr * weight_decay`` is large for a decay 1000x too strong and for a usual decay under
    a learning rate 100x too high: only the first is the decay's doing (issue 46, item 3)."""
    from dataclasses import replace

    from gradoc.detect.history import synthetic
    from gradoc.diagnose import diagnose
    from gradoc.findings import check_all

    h = synthetic(loss=[2.0] * 10 + [2.1, 5.0, 30.0, 25.0, 28.0] + [26.0] * 45)
    said = {"type": optimizer, "lr": lr, "weight_decay": decay, "momentum": 0.0}
    run = replace(h, meta=replace(h.meta, optimizers=[said]))
    top = next(f for f in diagnose(run, check_all(run)) if f.kind == "loss_blowup")
    reg = next(x for x in top.hypotheses if x.family.value == "regularization")
    assert state in {s.state.value for s in reg.signs}, [s.claim for s in reg.signs]


def test_the_root_cause_is_one_sentence_the_cause_and_its_heaviest_sign() -> None:
    """The evidence stays under the hypothesis; the root cause says the cause and the one
    sign that tells most (the first of equals), not every sign again."""
    from gradoc.detect.finding import Hypothesis
    from gradoc.diagnose import root_cause

    h = Hypothesis("learning_rate", "learning rate too high", "lower it")
    h.seen("the loss rose 3x in 10 steps", 1.0)
    h.seen("the update/weight ratio was 0.4 at step 12", 2.0)
    h.seen("the gradient norm grew 50x", 2.0)
    h.against("the data has no NaN", 1.0)
    assert root_cause(h) == "learning rate too high (the update/weight ratio was 0.4 at step 12)"
    bare = Hypothesis("data", "a bad batch", "look at it")
    bare.unseen("a batch of outliers")
    assert root_cause(bare) == "a bad batch"
