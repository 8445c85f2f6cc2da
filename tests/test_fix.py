"""`gradoc run --guard/--lr-scale/--fix` and `gradoc fix`: the fix applied, re-run, compared."""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import pytest

import gradoc
from gradoc._util.json_types import JsonObject
from gradoc.analysis import Report
from gradoc.detect.finding import CodeLine, Finding, Fix, Horizon
from gradoc.fix import choose, code_fixes
from gradoc.fix.remedy import find_definition
from gradoc.store.meta import RunMeta
from tests.test_cli import _one_line_error, gradoc_cli

LR_TOO_HIGH = textwrap.dedent(
    """
    import sys
    import torch, torch.nn as nn, torch.nn.functional as F

    torch.manual_seed(0)
    w = torch.randn(16, 1)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=float(sys.argv[1]), momentum=0.9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)  # resets lr to base each step
    for step in range(150):
        x = torch.randn(64, 16)
        loss = F.mse_loss(model(x), x @ w)
        opt.zero_grad(); loss.backward(); opt.step(); sched.step()
    print("lr", opt.param_groups[0]["lr"])
    """
)

NAN_IN_CODE = textwrap.dedent(
    """
    import torch, torch.nn as nn, torch.nn.functional as F

    class Norm(nn.Module):
        def forward(self, x):
            return (x - x.mean(1, keepdim=True)) / x.std(1, keepdim=True)  # no epsilon

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), Norm(), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(120):
        x = torch.randn(32, 8)
        if step % 40 == 39:
            x[0] = 0.0
            model[0].bias.data.zero_()  # a zero row gives a constant row: std 0, 0/0
        loss = F.mse_loss(model(x), x.sum(1, keepdim=True))
        opt.zero_grad(); loss.backward(); opt.step()
    """
)


def test_run_fix_lowers_the_learning_rate_and_shows_the_finding_gone(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(LR_TOO_HIGH)
    out = tmp_path / "runs" / "a"
    done = gradoc_cli("run", "--out", str(out), "--fix", str(script), "0.3")
    assert done.returncode == 0, done.stderr
    fixed = tmp_path / "runs" / "a-fixed"
    result = json.loads((fixed / "fix.json").read_text())
    assert result["remedy"]["kind"] == "lr_scale" and result["remedy"]["value"] == 0.1
    # the learning-rate story (a divergence, with its exploding gradients) is gone
    assert {f["kind"] for f in result["disappeared"]} & {
        "exploding_gradients",
        "loss_blowup",
        "loss_divergence",
    }
    assert not result["remaining"]
    assert result["after"]["status"] == "healthy" and result["before"]["status"] == "problems"
    # the first run ended NaN (its last loss, not a median of the finite ones before it)
    assert result["after"]["final_loss"] < 1.0 and result["before"]["final_loss"] == "nan"
    # the scale reached the scheduler's base rate: LambdaLR did not undo it
    assert "lr 0.03" in done.stdout
    with gradoc.open_run(fixed) as log:
        assert log.lr().values[-1] == pytest.approx(0.03)
        assert "lr_scaled" in [e.kind for e in log.events]
    assert "before / after" in done.stderr and "gone" in done.stderr


NAN_TWO_OPERANDS = NAN_IN_CODE.replace(
    "/ x.std(1, keepdim=True)  # no epsilon",
    "/ x.std(1, keepdim=True) * (x.shape[1] / x.shape[1])  # no epsilon",
)
"""The same NaN, on a line with two denominators: which one to clamp, the line does not say,
so the fix stays prose (and the no-code remedy is what gradoc re-runs with)."""


def test_fix_writes_the_stable_std_where_the_nan_was_born_and_verifies_it(
    tmp_path: Path,
) -> None:
    project, before = _project(tmp_path, NAN_IN_CODE)
    done = gradoc_cli("fix", str(before), "train.py", cwd=project)
    assert done.returncode == 0, done.stderr
    result = json.loads((project / "runs" / "before-fixed" / "fix.json").read_text())
    assert result["verdict"] == "verified", result["why_not"]
    # a standard deviation of 0 (a constant row): the root of the variance plus an epsilon,
    # as LayerNorm does, not a clamp of the std (whose backward at 0 stays undefined)
    assert result["patch"]["after"] == [
        "        return (x - x.mean(1, keepdim=True)) / torch.sqrt(x.var(1, keepdim=True) + 1e-5)"
        "  # no epsilon"
    ]
    assert "nonfinite" in [f["kind"] for f in result["disappeared"]]
    assert result["after"]["first_nonfinite_loss"] is None
    assert result["before"]["first_nonfinite_loss"] == 39


def test_fix_writes_the_idiom_where_a_clamp_could_not_choose_its_operand(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(NAN_TWO_OPERANDS)
    before = tmp_path / "before"
    assert gradoc_cli("run", "--out", str(before), str(script)).returncode == 0
    done = gradoc_cli("fix", "--json", str(tmp_path / "fix.json"), str(before), str(script))
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "fix.json").read_text())
    # two divisions on the line: a clamp could not say which; the mechanism (a std of 0)
    # names the operand, and its idiom is written there
    assert result["verdict"] == "verified", result["why_not"]
    (after,) = result["patch"]["after"]
    assert "/ torch.sqrt(x.var(1, keepdim=True) + 1e-5) * (x.shape[1] / x.shape[1])" in after
    assert result["patch"]["line"] == 6 and result["patch"]["file"] == str(script)
    assert "stable form" in done.stderr.replace("\n", " ")


def test_fix_of_a_healthy_run_has_nothing_to_do(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(LR_TOO_HIGH)
    before = tmp_path / "ok"
    assert gradoc_cli("run", "--out", str(before), str(script), "0.01").returncode == 0
    done = gradoc_cli("fix", str(before), str(script), "0.01")
    assert done.returncode == 0 and "nothing to fix" in done.stderr
    assert not (tmp_path / "ok-fixed").exists()


def test_run_guard_and_lr_scale_flags(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(NAN_IN_CODE)
    done = gradoc_cli("run", "--guard", "--out", str(tmp_path / "g"), str(script))
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "g" / "report.json").read_text())
    assert report["run"]["guard"]["skipped"] == 3 and "guard    skipped 3" in done.stderr
    script.write_text(LR_TOO_HIGH)
    done = gradoc_cli("run", "--lr-scale", "0.5", "--out", str(tmp_path / "s"), str(script), "0.2")
    assert done.returncode == 0 and "lr 0.1" in done.stdout


def test_run_guard_that_gives_up_exits_4_with_one_line_and_a_full_report(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch, torch.nn as nn, torch.nn.functional as F
            model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
            opt = torch.optim.Adam(model.parameters(), lr=1e-2)
            for step in range(1000):
                x = torch.randn(32, 8)
                if step >= 150:
                    x = x * float("nan")  # the data source went bad for good
                loss = F.mse_loss(model(x), x.sum(1, keepdim=True))
                opt.zero_grad(); loss.backward(); opt.step()
            """
        )
    )
    done = gradoc_cli("run", "--guard", "--out", str(tmp_path / "r"), str(script))
    assert done.returncode == 4 and "Traceback" not in done.stderr
    assert "gradoc guard gave up at step" in done.stderr.splitlines()[0]
    assert "the guard stopped training" in done.stderr and "re-running" not in done.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["run"]["status"] == "gave_up" and report["run"]["guard"]["rollbacks"] == 3
    assert report["findings"][0]["origin"]["phase"] == "input"
    with gradoc.open_run(tmp_path / "r") as log:
        first = next(e for e in log.events if e.kind == "skipped_update")
    assert first.step == 150 and first.data["origin"]["phase"] == "input"


def test_fix_and_flags_refuse_bad_input(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(LR_TOO_HIGH)
    _one_line_error(gradoc_cli("fix", str(tmp_path / "nope"), str(script)), "no run log")
    done = gradoc_cli("run", "--lr-scale", "-1", str(script))
    assert done.returncode == 2 and "must be a positive number" in done.stderr


def test_choose_takes_the_first_applicable_fix_of_the_most_serious_finding() -> None:
    def finding(kind: str, severity: str, *fixes: Fix) -> Finding:
        return Finding(
            kind=kind, severity=severity, step=1, layer=None, summary=kind, fixes=list(fixes)
        )

    findings = [
        finding("dead_units", "warning", Fix(Horizon.SHORT_TERM, "reinit")),
        finding(
            "loss_divergence",
            "error",
            Fix(Horizon.IMMEDIATE, "lower", apply={"lr_scale": 0.1}),
            Fix(Horizon.IMMEDIATE, "clip", apply={"clip": 2.0}),
        ),
        finding("loss_spike", "info", Fix(Horizon.IMMEDIATE, "x", apply={})),
    ]
    report = Report(status="problems", findings=findings)
    remedy = choose(report)
    assert remedy is not None and (remedy.kind, remedy.value) == ("lr_scale", 0.1)
    assert remedy.lr_scale == 0.1 and remedy.guard is None
    assert choose(Report(status="problems", findings=findings[:1])) is None
    assert [f.finding for f in code_fixes(report, [])] == ["dead_units"]


def test_find_definition_names_the_line_that_creates_a_layer(tmp_path: Path) -> None:
    src = tmp_path / "model.py"
    src.write_text(
        "import torch.nn as nn\n"
        "class Net(nn.Module):\n"
        "    def __init__(self):\n"
        "        self.encoder: nn.Module = nn.Linear(2, 2)\n"
        "        self.head = nn.Sequential(nn.Linear(2, 2))\n"
        "        if self.head == 1: pass\n"
    )
    assert find_definition("encoder", [src]) == CodeLine(
        str(src), 4, "self.encoder: nn.Module = nn.Linear(2, 2)"
    )
    found = find_definition("head.0", [src])
    assert found is not None and found.line == 5
    assert find_definition("missing", [src]) is None


WRITES_ITS_FILES = LR_TOO_HIGH + textwrap.dedent(
    """
    import os
    os.makedirs("checkpoints", exist_ok=True)
    torch.save(model.state_dict(), "checkpoints/last.pt")  # written from C++
    with open("metrics.csv", "a") as f:  # appended to by each run
        f.write(f"{loss.item()}\\n")
    """
)
assert "metrics.csv" in WRITES_ITS_FILES


def test_fix_re_runs_in_a_copy_and_leaves_the_users_files_as_they_were(tmp_path: Path) -> None:
    """The script writes a checkpoint and appends to a CSV by relative paths: the fixed
    re-run writes them in a copy of its folder, and the user's stay as the first run left
    them (the fixed run itself trained: its loss came down)."""
    project, before = _project(tmp_path, WRITES_ITS_FILES, "0.3")
    kept = {p: p.read_bytes() for p in (project / "metrics.csv", project / "checkpoints/last.pt")}
    listed = sorted(p.relative_to(project) for p in project.rglob("*") if "runs" not in p.parts)
    done = gradoc_cli("fix", str(before), "train.py", "0.3", cwd=project)
    assert done.returncode == 0, done.stderr
    assert {p: p.read_bytes() for p in kept} == kept  # one line in the CSV, the first model
    assert "in a copy of" in " ".join(done.stderr.split())
    assert (
        sorted(p.relative_to(project) for p in project.rglob("*") if "runs" not in p.parts)
        == listed
    )
    result = json.loads((project / "runs" / "before-fixed" / "fix.json").read_text())
    assert result["remedy"]["kind"] == "lr_scale"
    assert result["after"]["final_loss"] < 1.0 and result["before"]["final_loss"] == "nan"


def test_a_copy_skips_what_is_not_the_scripts_input_and_refuses_a_huge_folder(
    tmp_path: Path,
) -> None:
    import os

    from gradoc.runtime.workcopy import CopyRefused, copy_root, working_copy

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text("print('hi')\n")
    (tmp_path / "data.txt").write_text("1,2,3\n")
    for skipped in ("__pycache__", ".git", "runs/a", "venv"):
        (tmp_path / skipped).mkdir(parents=True)
    (tmp_path / "runs" / "a" / "run.db").write_bytes(b"x" * 100)
    (tmp_path / "venv" / "pyvenv.cfg").write_text("home = /usr\n")
    script = tmp_path / "src" / "train.py"
    assert copy_root(script, tmp_path) == tmp_path.resolve()  # the script lies under cwd
    assert copy_root(tmp_path / "src" / "train.py", tmp_path / "elsewhere") == script.parent
    here = os.getcwd()
    with working_copy(script, tmp_path) as copied:
        root = copied.dest
        assert copied.of(tmp_path / "data.txt") == root / "data.txt"
        assert copied.of(Path("/etc/hosts")) is None
        assert Path.cwd() == root and copied.script.read_text() == "print('hi')\n"
        assert sorted(p.name for p in root.iterdir()) == ["data.txt", "runs", "src"]
        assert not (root / "runs" / "a").exists()
    assert os.getcwd() == here and not root.exists()  # back where it was, the copy removed
    with pytest.raises(CopyRefused, match="more than"), working_copy(script, tmp_path, limit=10):
        pass
    assert os.getcwd() == here


CLIPS_TO_ZERO = textwrap.dedent(
    """
    import torch, torch.nn as nn, torch.nn.functional as F

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    w = torch.randn(8, 1)
    for step in range(120):
        x = torch.randn(32, 8)
        loss = F.mse_loss(model(x), x @ w)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.0)  # 0 meant "no clipping"
        opt.step()
    """
)


def _project(tmp_path: Path, source: str, *args: str) -> tuple[Path, Path]:
    """A project folder whose ``train.py`` is ``source``, run once under gradoc from there
    (with ``args``): the folder, and the run's directory (under ``runs/``)."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(source)
    before = project / "runs" / "before"
    done = gradoc_cli("run", "--out", str(before), "train.py", *args, cwd=project)
    assert done.returncode == 0, done.stderr
    return project, before


def test_fix_edits_a_clip_of_zero_in_a_copy_verifies_it_and_writes_it_only_when_asked(
    tmp_path: Path,
) -> None:
    project, before = _project(tmp_path, CLIPS_TO_ZERO)
    script = project / "train.py"
    done = gradoc_cli("fix", str(before), "train.py", cwd=project)
    assert done.returncode == 0, done.stderr
    assert script.read_text() == CLIPS_TO_ZERO  # not written without --write
    result = json.loads((project / "runs" / "before-fixed" / "fix.json").read_text())
    assert result["verdict"] == "verified"
    patch = result["patch"]
    assert (patch["finding"], patch["line"]) == ("zero_clip", 13)
    assert "-    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.0)" in patch["diff"]
    assert "+    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)" in patch["diff"]
    assert "zero_clip" in [f["kind"] for f in result["disappeared"]]
    assert result["after"]["status"] == "healthy" and not result["new"]
    assert result["after"]["final_loss"] < 0.5 * result["before"]["final_loss"]
    assert "remedy" not in result  # the edit, not a no-code remedy
    written = gradoc_cli("fix", "--write", str(before), "train.py", cwd=project)
    assert written.returncode == 0, written.stderr
    want = CLIPS_TO_ZERO.replace("model.parameters(), 0.0)", "model.parameters(), 1.0)")
    assert script.read_text() == want  # exactly the diff shown, nothing else
    assert "written to" in " ".join(written.stderr.split())


def test_an_edit_is_refused_whole_when_its_line_changed(tmp_path: Path) -> None:
    from gradoc.fix.patch import Edit, EditFailed

    path = tmp_path / "train.py"
    path.write_text("a = 1\n    clip(p, 0)\nb = 2\n")
    edit = Edit("zero_clip", str(path), 2, "    clip(p, 0)", ("    clip(p, 1.0)",), "clip at 1")
    assert edit.diff().count("\n-") == 1 and "+    clip(p, 1.0)" in edit.diff()
    path.write_text("a = 1\n    clip(p, 0.5)\nb = 2\n")  # edited since the run
    with pytest.raises(EditFailed, match="no longer reads as the run saw it"):
        edit.apply()
    assert path.read_text() == "a = 1\n    clip(p, 0.5)\nb = 2\n"  # untouched


@pytest.mark.parametrize(
    ("line", "after"),
    [
        (
            "    clip_grad_norm_(model.parameters(), 0.0)",
            ["    clip_grad_norm_(model.parameters(), 1.0)"],
        ),
        (
            "    nn.utils.clip_grad_norm_(ps, max_norm=0)",
            ["    nn.utils.clip_grad_norm_(ps, max_norm=1.0)"],
        ),
        (
            "    torch.nn.utils.clip_grad_value_(ps, clip_value=0)",
            ["    torch.nn.utils.clip_grad_value_(ps, clip_value=1.0)"],
        ),
        (
            "        clip_grad_norm_(ps, cfg.max_grad_norm)",
            [
                "        if cfg.max_grad_norm > 0:  # 0 means no clipping",
                "            clip_grad_norm_(ps, cfg.max_grad_norm)",
            ],
        ),
        ("    norm = clip_grad_norm_(ps, cfg.clip)", None),  # its result is used: no safe edit
        ("    clip_grad_norm_(ps)", None),  # no threshold on the line
    ],
)
def test_the_zero_clip_edit_is_written_from_the_located_line(
    tmp_path: Path, line: str, after: list[str] | None
) -> None:
    from gradoc.fix.patch import edit_for

    path = tmp_path / "train.py"
    path.write_text(f"for step in range(3):\n{line}\n")
    fix = Fix(Horizon.IMMEDIATE, "clip", code=CodeLine(str(path), 2, line.strip()))
    finding = Finding(
        kind="zero_clip", severity="error", step=0, layer=None, summary="", fixes=[fix]
    )
    edit = edit_for([finding])
    assert (list(edit.after) if edit else None) == after


FORGETS_ZERO_GRAD = textwrap.dedent(
    """
    import torch, torch.nn as nn, torch.nn.functional as F

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    w = torch.randn(8, 1)
    for step in range(150):
        x = torch.randn(64, 8)
        loss = F.mse_loss(model(x), x @ w)
        loss.backward()  # zero_grad() forgotten
        optimizer.step()
    """
)


def test_fix_inserts_the_missing_zero_grad_after_the_step_and_verifies_it(tmp_path: Path) -> None:
    project, before = _project(tmp_path, FORGETS_ZERO_GRAD)
    script = project / "train.py"
    done = gradoc_cli("fix", "--write", str(before), "train.py", cwd=project)
    assert done.returncode == 0, done.stderr
    result = json.loads((project / "runs" / "before-fixed" / "fix.json").read_text())
    assert result["verdict"] == "verified" and result["why_not"] == []
    assert "accumulating_gradients" in [f["kind"] for f in result["disappeared"]]
    step = "    optimizer.step()\n"
    cleared = "    optimizer.zero_grad()  # the next backward() starts from no gradient\n"
    assert script.read_text() == FORGETS_ZERO_GRAD.replace(step, step + cleared)
    page = (project / "runs" / "before-fixed" / "fix.html").read_text()
    assert "<b>verified</b>: clear optimizer&#x27;s gradients after its step" in page
    assert "<span class='add'>+    optimizer.zero_grad()" in page  # the diff, the line added
    assert 'id="chart-loss-before-after"><svg' in page and ">before</text>" in page


def test_an_edit_that_cures_its_finding_but_leaves_the_loss_worse_did_not_help(
    tmp_path: Path,
) -> None:
    """A character GRU tuned with its gradients summed (``tests/shapes/no_zero_grad.py``):
    cleared, they are 13x smaller, and at the same learning rate it learns less in 120 steps.
    The edit is right, but the run does not show it working: "did not help", in its numbers,
    and --write writes nothing."""
    source = (Path(__file__).parent / "shapes" / "no_zero_grad.py").read_text()
    project, before = _project(tmp_path, source)
    script = project / "train.py"
    done = gradoc_cli("fix", "--write", str(before), "train.py", cwd=project)
    assert done.returncode == 1, done.stderr
    result = json.loads((project / "runs" / "before-fixed" / "fix.json").read_text())
    assert result["verdict"] == "did not help"
    assert any(w.startswith("the loss ended worse") for w in result["why_not"]), result["why_not"]
    assert "accumulating_gradients" in [f["kind"] for f in result["disappeared"]]
    assert script.read_text() == source
    assert "did not help" in " ".join(done.stderr.split())


@pytest.mark.parametrize(
    ("line", "name", "after"),
    [
        ("    opt.step()", "opt", "    opt.zero_grad()"),
        ("    optimizer.step(); scheduler.step()", "optimizer", "    optimizer.zero_grad()"),
        ("        self.optim.step()", None, "        self.optim.zero_grad()"),
        ("    optimizer.step(); scheduler.step()", None, None),  # which one is the optimizer?
        ("    for o in opts: o.step()", "o", None),  # the next line is not in its block
        ("    clip_grad_norm_(ps, 1.0)", "opt", None),  # not the step: it would undo the update
    ],
)
def test_the_zero_grad_edit_is_written_after_the_line_that_steps(
    tmp_path: Path, line: str, name: str | None, after: str | None
) -> None:
    from gradoc.fix.patch import edit_for

    path = tmp_path / "train.py"
    path.write_text(f"while True:\n{line}\n")
    fix = Fix(Horizon.IMMEDIATE, "zero_grad", code=CodeLine(str(path), 2, line.strip()))
    details = {"optimizer": name} if name else {}
    finding = Finding(
        kind="accumulating_gradients",
        severity="error",
        step=0,
        layer=None,
        summary="",
        fixes=[fix],
        details=details,
    )
    edit = edit_for([finding])
    if after is None:
        assert edit is None
    else:
        assert edit is not None and edit.after[0] == line
        assert edit.after[1].split("  #")[0] == after


def test_in_a_game_zero_grad_goes_where_the_steps_loop_begins(tmp_path: Path) -> None:
    """Two optimizers (a GAN): the generator's backward reaches the discriminator's
    parameters, so the discriminator's gradients are cleared as its loop begins, where the
    program would have cleared them, not after its step (they would come back before the
    next one)."""
    from gradoc.fix.patch import edit_for

    path = tmp_path / "gan.py"
    path.write_text(
        "for epoch in range(3):\n"
        "    for _ in range(2):\n"
        "        real = d(x)\n"
        "        (real.mean() - d(g(z).detach()).mean()).backward()\n"
        "        d_opt.step()\n"
        "    g_opt.zero_grad()\n"
        "    (-d(g(z)).mean()).backward()\n"
        "    g_opt.step()\n"
    )
    fix = Fix(Horizon.IMMEDIATE, "zero_grad", code=CodeLine(str(path), 5, "d_opt.step()"))
    finding = Finding(
        kind="accumulating_gradients", severity="error", step=0, layer=None, summary="",
        fixes=[fix], details={"optimizer": "d_opt"},
    )  # fmt: skip
    game = RunMeta(optimizers=[{"type": "Adam"}, {"type": "Adam"}])
    edit = edit_for([finding], game)
    assert edit is not None and edit.line == 3
    assert [t.split("  #")[0] for t in edit.after] == [
        "        d_opt.zero_grad()",
        "        real = d(x)",
    ]
    alone = edit_for([finding], RunMeta(optimizers=[{"type": "Adam"}]))
    assert alone is not None and alone.line == 5  # one optimizer: after its step


@pytest.mark.parametrize(
    ("line", "op", "after"),
    [
        ("rel = pos / span", "aten.div.Tensor", "rel = pos / span.clamp_min(1e-6)"),
        ("h = h + torch.log(c)", "aten.log.default", "h = h + torch.log(c.clamp_min(1e-6))"),
        ("h = h * c.pow(-0.5)", "aten.pow.Tensor_Scalar", "h = h * c.clamp_min(1e-6).pow(-0.5)"),
        (
            "h = h * torch.sqrt(c * self.gain)",
            "SqrtBackward0",
            "h = h * torch.sqrt((c * self.gain).clamp_min(1e-6))",
        ),
        (
            "h = h * (c * self.gain) ** 0.5",
            "PowBackward0",
            "h = h * ((c * self.gain).clamp_min(1e-6)) ** 0.5",
        ),
        ("y = a / b / c", "aten.div.Tensor", None),  # two denominators: which one?
        ("y = x / 2.0", "aten.div.Tensor", None),  # a constant is not what was 0
        ("y = torch.exp(x)", "aten.exp.default", None),  # no clamp makes an overflow safe
    ],
)
def test_the_nonfinite_edit_clamps_the_unsafe_operand_of_the_located_op(
    tmp_path: Path, line: str, op: str, after: str | None
) -> None:
    from gradoc.detect.finding import Origin
    from gradoc.fix.patch import edit_for

    path = tmp_path / "model.py"
    path.write_text(f"def f(x):\n    {line}\n")
    origin = Origin(phase="forward", step=3, module=None, op=op, file=str(path), line=2, code=line)
    finding = Finding(
        kind="nonfinite", severity="error", step=3, layer=None, summary="", origin=origin
    )
    edit = edit_for([finding])
    assert (edit.after[0].strip() if edit else None) == after


TRAINS_UNTIL_INTERRUPTED = LR_TOO_HIGH.replace(
    "for step in range(150):", "for step in itertools.count():"
).replace("import sys\n", "import itertools, sys\n")


def test_a_fix_re_runs_a_script_stopped_by_ctrl_c_for_as_long_as_the_first_run(
    tmp_path: Path,
) -> None:
    """A loop that trains until the user stops it (an actor-critic run until Ctrl-C): its fix's
    re-run is interrupted after as long as the first run lasted, and compared."""
    import signal
    import subprocess
    import sys
    import time

    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(TRAINS_UNTIL_INTERRUPTED)
    before = project / "runs" / "before"
    first = subprocess.Popen(
        [sys.executable, "-m", "gradoc", "run", "--out", str(before), "train.py", "0.3"],
        cwd=project,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(6)
    first.send_signal(signal.SIGINT)
    first.wait(timeout=120)
    report = json.loads((before / "report.json").read_text())
    assert report["run"]["status"] == "interrupted"
    began = time.monotonic()
    done = gradoc_cli("fix", str(before), "train.py", "0.3", cwd=project)
    took = time.monotonic() - began
    assert done.returncode == 0, done.stderr
    assert "interrupted if it runs past" in " ".join(done.stderr.split())
    result = json.loads((project / "runs" / "before-fixed" / "fix.json").read_text())
    assert result["after"]["steps"] > 10  # it trained, until the bound
    assert result["remedy"]["kind"] == "lr_scale"
    assert took < 120  # bounded: without the bound, the re-run would never end


def test_a_rate_the_no_code_scale_does_not_reach_is_then_scaled_where_the_optimizer_is_made(
    tmp_path: Path,
) -> None:
    """LBFGS at lr 8 (meant 0.8; ``tests/shapes/lbfgs_lr80.py``): the learning rate x0.1
    without a code change leaves the blow-up; the same scale written where the optimizer is
    made (``lr=args.lr * 0.1``) cures it, verified, and --write writes it."""
    source = (Path(__file__).parent / "shapes" / "lbfgs_lr80.py").read_text()
    source = source.replace("default=80.0", "default=8.0")  # in the code: no flag to scale
    project, before = _project(tmp_path, source, "--steps", "5")
    args = ("train.py", "--steps", "5")
    done = gradoc_cli("fix", "--write", str(before), *args, cwd=project)
    assert done.returncode == 0, done.stderr
    first = json.loads((project / "runs" / "before-fixed" / "fix.json").read_text())
    assert first["remedy"]["kind"] == "lr_scale" and "patch" not in first
    assert "loss_blowup" in [f["kind"] for f in first["remaining"]]
    second = json.loads((project / "runs" / "before-fixed-2" / "fix.json").read_text())
    assert second["verdict"] == "verified", second["why_not"]
    assert "loss_blowup" in [f["kind"] for f in second["disappeared"]]
    made = "opt = torch.optim.LBFGS(model.parameters(), lr=args.lr)"
    assert (project / "train.py").read_text() == source.replace(
        made, made.replace("lr=args.lr", "lr=args.lr * 0.1")
    )


@pytest.mark.parametrize(
    ("line", "after"),
    [
        ("opt = torch.optim.Adam(model.parameters(), lr=0.5)", "lr=0.05)"),
        ("opt = optim.SGD(params, 3.0, momentum=0.9)", "SGD(params, 0.3, momentum=0.9)"),
        ("opt = torch.optim.AdamW(ps, lr=cfg['lr'] / 2)", "lr=(cfg['lr'] / 2) * 0.1)"),
        ("opt = torch.optim.Adam(model.parameters())", None),  # the default rate: not on the line
        ("opt = make_optimizer(model, lr=0.5)", None),  # not an optimizer's class
    ],
)
def test_the_learning_rate_edit_scales_the_rate_where_the_optimizer_is_made(
    tmp_path: Path, line: str, after: str | None
) -> None:
    from gradoc.fix.patch import edit_for

    path = tmp_path / "train.py"
    path.write_text(f"{line}\n")
    fix = Fix(Horizon.IMMEDIATE, "lower the learning rate", apply={"lr_scale": 0.1})
    finding = Finding(
        kind="loss_blowup", severity="error", step=3, layer=None, summary="", fixes=[fix]
    )
    optimizers = [{"type": "Adam", "at": {"file": str(path), "line": 1, "code": line}}]
    edit = edit_for([finding], RunMeta(optimizers=optimizers))
    if after is None:
        assert edit is None
    else:
        assert edit is not None and edit.after[0].endswith(after), edit.after
    assert edit_for([finding]) is None  # where it was made is unknown (gradoc.watch)


def test_fix_says_before_its_re_run_what_the_first_run_wrote_outside_the_copy(
    tmp_path: Path,
) -> None:
    """A re-run in the copy still reaches what the script writes by an absolute path: the
    user asked for the re-run, so it runs, and says so before it starts."""
    project, logs = tmp_path / "project", tmp_path / "logs"
    project.mkdir()
    logs.mkdir()
    log = logs / "metrics.txt"
    script = project / "train.py"
    script.write_text(
        LR_TOO_HIGH.replace(
            'print("lr"', f"open({str(log)!r}, 'a').write(str(loss.item()))\nprint(\"lr\""
        )
    )
    before = project / "before"
    assert gradoc_cli("run", "--out", str(before), "train.py", "0.3", cwd=project).returncode == 0
    done = gradoc_cli("fix", str(before), "train.py", "0.3", cwd=project)
    said = " ".join(done.stderr.split())
    assert f"the first run wrote {log}, outside the copied folder; the re-run will do" in said
    assert said.index("outside the copied folder") < said.index("before / after")


def test_fix_reaches_the_data_the_first_run_read_above_its_folder(tmp_path: Path) -> None:
    """A script that reads its data by a relative path out of its folder (``../data``): the
    copy reaches it by a link, the fix is re-run and verified, and the data folder is as it
    was (nothing copied into it, nothing written)."""
    project, data = tmp_path / "project", tmp_path / "data"
    project.mkdir()
    data.mkdir()
    (data / "scale.txt").write_text("1.0")
    (project / "train.py").write_text(
        LR_TOO_HIGH.replace(
            "torch.manual_seed(0)", 'scale = float(open("../data/scale.txt").read())'
        )
    )
    before = project / "before"
    assert gradoc_cli("run", "--out", str(before), "train.py", "0.3", cwd=project).returncode == 0
    done = gradoc_cli("fix", "--json", str(tmp_path / "fix.json"), str(before), "train.py", "0.3",
                      cwd=project)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "fix.json").read_text())["verdict"] == "verified"
    assert [p.name for p in data.iterdir()] == ["scale.txt"]
    assert (data / "scale.txt").read_text() == "1.0"


def test_fix_that_the_copy_cannot_run_says_could_not_run_and_why(tmp_path: Path) -> None:
    """A script that writes by a relative path out of its folder (``../data/log.txt``): a
    copy of the folder cannot take it (it would write the user's folder, or lose it), so the
    fix is not re-run; fix.json says "could not run" and why, and gradoc exits with the
    reason in a line."""
    project, data = tmp_path / "project", tmp_path / "data"
    project.mkdir()
    data.mkdir()
    (data / "scale.txt").write_text("1.0")
    script = project / "train.py"
    script.write_text(
        LR_TOO_HIGH.replace(
            "torch.manual_seed(0)",
            'scale = float(open("../data/scale.txt").read())\n'
            'open("../data/log.txt", "a").write("ran")',
        )
    )
    before = project / "before"
    assert gradoc_cli("run", "--out", str(before), "train.py", "0.3", cwd=project).returncode == 0
    done = gradoc_cli("fix", "--json", str(tmp_path / "fix.json"), str(before), "train.py", "0.3",
                      cwd=project)  # fmt: skip
    assert done.returncode != 0 and "Traceback" not in done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("gradoc: error: ") and str(project) in line
    assert "opens ../data/log.txt by a relative path that leaves" in line
    assert "writes there" in line
    result = json.loads((tmp_path / "fix.json").read_text())
    assert result["verdict"] == "could not run" and "../data/log.txt" in result["why_not"][0]


def test_a_rate_set_by_a_flag_is_scaled_in_the_command(tmp_path: Path) -> None:
    """The same LBFGS at lr 8, set by ``--lr 8`` on the command line: the flag is the
    program's own knob, and the fix re-runs the command with ``--lr 0.8``: the blow-up is
    gone, no code changed."""
    source = (Path(__file__).parent / "shapes" / "lbfgs_lr80.py").read_text()
    project, before = _project(tmp_path, source, "--steps", "5", "--lr", "8")
    done = gradoc_cli("fix", str(before), "train.py", "--steps", "5", "--lr", "8", cwd=project)
    assert done.returncode == 0, done.stderr
    result = json.loads((project / "runs" / "before-fixed" / "fix.json").read_text())
    assert result["remedy"]["kind"] == "lr_flags" and result["remedy"]["action"] == "--lr 0.8"
    assert "loss_blowup" in [f["kind"] for f in result["disappeared"]]
    assert (project / "train.py").read_text() == source
    assert "the learning-rate flags x0.1 (--lr 0.8)" in " ".join(done.stderr.split())


@pytest.mark.parametrize(
    ("args", "after"),
    [
        (["--lr", "0.5", "--epochs", "3"], ["--lr", "0.05", "--epochs", "3"]),
        (
            ["--learning_rate=0.1", "--min_lr=0.01", "--lr_decay_iters=150"],
            ["--learning_rate=0.01", "--min_lr=0.001", "--lr_decay_iters=150"],
        ),
        (["--trainer.learning_rate=0.5"], ["--trainer.learning_rate=0.05"]),
        (["--lr-scheduler", "cosine", "--clip", "1"], None),  # no number, no rate
    ],
)
def test_learning_rate_flags_are_found_and_scaled(args: list[str], after: list[str] | None) -> None:
    from gradoc.fix.remedy import scaled_lr_flags

    found = scaled_lr_flags(args, 0.1)
    assert (found[0] if found else None) == after


def test_the_loss_of_an_objective_not_expected_to_fall_is_not_compared() -> None:
    """An actor-critic's loss at lr x0.01 ended at 68 against 3.8 at x100 (its returns grew
    with its episodes): a policy gradient's loss says nothing of how well it does."""
    from gradoc.fix.compare import Comparison, Side, verdict

    def side(loss: float) -> Side:
        return Side("run", "healthy", 0, 10, 1.0, 0.1, loss, None, [loss], None)

    supervised = Comparison([], [], [], side(3.8), side(68.0), None)
    assert verdict(supervised, "policy_collapse")[1] == ["the loss ended worse: 68 against 3.8"]
    policy = Comparison([], [], [], side(3.8), side(68.0), None, falls=False)
    assert verdict(policy, "policy_collapse") == ("verified", [])


def _findings(*specs: tuple[str, tuple[JsonObject, ...]]) -> Report:
    """A report whose serious findings (in order) have these no-code fixes."""
    findings = [
        Finding(
            kind=kind,
            severity="error",
            step=1,
            layer=None,
            summary=kind,
            fixes=[Fix(Horizon.IMMEDIATE, f"{kind} fix {i}", apply=a) for i, a in enumerate(apply)],
        )
        for kind, apply in specs
    ]
    return Report(status="problems", findings=findings)


def test_the_plan_takes_each_hypothesis_fix_in_order_and_none_twice() -> None:
    from gradoc.runtime.fixing import plan

    report = _findings(
        ("loss_divergence", ({"lr_scale": 0.1}, {"clip": 2.0})),
        ("nonfinite", ({"skip_nonfinite": True}, {"lr_scale": 0.1}, {"clip": 5.0})),
    )
    tried = [(t.finding, t.remedy.kind if t.remedy else None) for t in plan(report, RunMeta(), [])]
    # the same kind of remedy asked by a later finding is the same fix: planned once
    assert tried == [
        ("loss_divergence", "lr_scale"),
        ("loss_divergence", "clip"),
        ("nonfinite", "skip_nonfinite"),
    ]


@pytest.mark.parametrize("cured_by", ["clip", None])
def test_a_fix_that_did_not_help_gives_way_to_the_next_hypothesis_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cured_by: str | None
) -> None:
    """The re-runs are faked here (each real one is tested above): the order, the bound and
    the exit code of the loop over the plan."""
    from gradoc.fix.compare import Comparison, Side
    from gradoc.runtime import fixing

    def side(loss: float) -> Side:
        return Side("run", "problems", 0, 10, 1.0, 0.1, loss, None, [loss], None)

    runs: list[str] = []

    def rerun(self: object, edit: object, remedy: object, args: object = None):
        assert edit is None and remedy is not None
        runs.append(remedy.kind)  # type: ignore[attr-defined]
        result = Comparison([], [], [], side(1.0), side(1.0), None, remedy=remedy)  # type: ignore[arg-type]
        result.verdict = "verified" if remedy.kind == cured_by else "did not help"  # type: ignore[attr-defined]
        self.tried.append({"fix": remedy.kind, "verdict": result.verdict})  # type: ignore[attr-defined]
        return 0, result

    monkeypatch.setattr(fixing.Rerun, "__call__", rerun)
    monkeypatch.setattr(fixing, "_meta", lambda run_dir: RunMeta())
    report = _findings(
        ("loss_divergence", ({"lr_scale": 0.1}, {"clip": 2.0})),
        ("nonfinite", ({"skip_nonfinite": True},)),
        ("loss_spike", ({"clip": "zclip"},)),
        ("exploding_gradients", ({"lr_scale": 0.5},)),
    )
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    code = fixing.fix(tmp_path / "run", report, script, [], None, None)
    if cured_by == "clip":
        assert (code, runs) == (0, ["lr_scale", "clip"])  # verified: no further re-run
    else:  # three different fixes, then gradoc gives up
        assert (code, runs) == (1, ["lr_scale", "clip", "skip_nonfinite"])


@pytest.mark.parametrize(
    ("args", "to", "after"),
    [
        (["--clip", "inf", "--lr", "20"], 0.25, ["--clip", "0.25", "--lr", "20"]),
        (["--max-grad-norm=0"], "zclip", ["--max-grad-norm=1"]),  # ZClip: no number, 1.0
        (["--trainer.grad_norm_clip", "1e9"], 2.0, ["--trainer.grad_norm_clip", "2"]),
        (["--clipping-mode", "value", "--epochs", "3"], 1.0, None),  # not a threshold
    ],
)
def test_clip_flags_are_found_and_set(args: list[str], to: float | str, after: object) -> None:
    from gradoc.fix.remedy import clip_flags, flag_clip

    found = clip_flags(args, flag_clip(to))
    assert (found[0] if found else None) == after


def test_a_program_that_clips_at_inf_gets_a_clip_it_can_apply_and_one_that_clips_keeps_it() -> None:
    from gradoc.findings.advice import warmup_fix
    from gradoc.findings.facts import Facts

    def facts(clip: tuple[float, int, int] | None, p99: float | None = None) -> Facts:
        return Facts(steps=100, lr=0.2, depth=2, module_types=set(), grad_p99=p99,
                     grad_median=None, max_update_ratio=None, median_update_ratio=None,
                     first_update_ratio=None, clip=clip)  # fmt: skip

    off = warmup_fix(facts((math.inf, 0, 39)), "add a warm-up")
    assert off.apply == {"clip": "zclip"} and "at inf, which never clips" in off.action
    assert warmup_fix(facts(None, 3.5), "add a warm-up").apply == {"clip": 3.5}
    kept = warmup_fix(facts((1.0, 80, 100)), "add a warm-up")
    assert kept.apply is None and "keep the program's gradient clipping at 1" in kept.action


def test_gradocs_own_remedies_are_not_planned_where_no_optimizer_steps() -> None:
    """A hand-written update (``w.add_(w.grad, alpha=-lr)``): gradoc's scale and clip are made
    at an optimizer's step and would reach nothing; a flag of the command still does."""
    from gradoc.runtime.fixing import plan

    report = _findings(("loss_blowup", ({"lr_scale": 0.1}, {"clip": "zclip"})))
    manual = RunMeta(steps_counted_by=["backward()"])
    assert plan(report, manual, []) == []
    kinds = [t.remedy.kind for t in plan(report, manual, [], ["--clip", "inf"]) if t.remedy]
    assert kinds == ["clip"]
    stepped = RunMeta(steps_counted_by=["optimizer.step()"])
    assert [t.remedy.kind for t in plan(report, stepped, []) if t.remedy] == ["lr_scale", "clip"]


def test_the_next_re_runs_go_beside_the_first(tmp_path: Path) -> None:
    from gradoc.runtime.fixing import Rerun

    def dirs(out: str | None) -> list[str]:
        rerun = Rerun(tmp_path / "run", Report(status="problems"), RunMeta(), tmp_path / "t.py",
                      [], None, [], None, out)  # fmt: skip
        seen = []
        for _ in range(3):
            seen.append(rerun.next_dir().name)
            rerun.tried.append({})
        return seen

    assert dirs(str(tmp_path / "fixed")) == ["fixed", "fixed-2", "fixed-3"]
    assert dirs(None)[0] == "run-fixed"  # -2 once RUN_DIR-fixed holds a run log


def test_two_fixes_tried_alone_are_tried_together_once() -> None:
    """A rate lowered through the command's flag and the command's clip restored, each tried
    alone without a verdict of verified: one re-run makes both (the rate's lowest try, the
    clip set in its arguments), said as two fixes together; a rate alone gives no pair."""
    from gradoc.fix.remedy import Remedy
    from gradoc.runtime.fixing import Rerun, _together

    args = ["--lr", "20", "--clip", "inf"]
    rerun = Rerun(Path("run"), None, RunMeta(), Path("train.py"), args, None, [], None)  # type: ignore[arg-type]
    lower = Remedy("lr_flags", 0.1, "loss_blowup", "--lr 2")
    rerun.calls.append((None, lower, ["--lr", "2", "--clip", "inf"]))
    assert _together(rerun) is None  # no clip tried
    clip = Remedy("clip_flags", 1.0, "loss_blowup", "--clip 1")
    rerun.calls.append((None, clip, ["--lr", "20", "--clip", "1"]))
    pair = _together(rerun)
    assert pair is not None
    edit, remedy, both, together = pair
    assert edit is None and remedy is clip
    assert both == ["--lr", "2", "--clip", "1"]
    assert together.finding == "loss_blowup"
    assert together.describe().startswith("two fixes together: the learning-rate flags x0.1")
    assert "gradient-clip flags set to 1" in together.describe()
