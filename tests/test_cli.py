"""The gradoc command line, run as a user runs it (a subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import gradoc

TRAIN = textwrap.dedent(
    """
    import sys
    import torch, torch.nn as nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(4, 8), nn.Linear(8, 1)
        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))

    print("argv", sys.argv[1:], "name", __name__)
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    for step in range(12):
        x = torch.randn(16, 4)
        loss = nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
        if "--nan" in sys.argv and step == 7:
            loss = loss * float("nan")
        opt.zero_grad(); loss.backward(); opt.step()
        if "--print" in sys.argv:
            print(f"loss {loss.item()!r}")
    if "--exit" in sys.argv:
        sys.exit(3)
    if "--raise" in sys.argv:
        raise ValueError("the script itself failed")
    """
)


def gradoc_cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m gradoc ARGS`` in ``cwd``, with ``env`` added to this process's."""
    return subprocess.run(
        [sys.executable, "-m", "gradoc", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        env={**os.environ, **env} if env else None,
    )


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(TRAIN)
    return path


def test_run_executes_the_script_unchanged_and_writes_the_run(script: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = gradoc_cli(
        "run", "--out", str(out), "--json", str(tmp_path / "r.json"), str(script), "a", "--b"
    )
    assert done.returncode == 0, done.stderr
    assert "argv ['a', '--b'] name __main__" in done.stdout  # the script's own output
    assert "healthy" in done.stderr  # the diagnosis
    report = json.loads((out / "report.json").read_text())
    assert report == json.loads((tmp_path / "r.json").read_text())
    assert report["schema"] == "gradoc.report/1" and report["status"] == "healthy"
    assert report["run"]["steps"] == 12 and report["run"]["script"].endswith("train.py")
    assert report["findings"] == []
    log = gradoc.open_run(out)
    assert {p.name for p in log.params} == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
    assert len(log.scalar("loss")) == 12  # the first step's loss too (attached at step 0)
    # step 0's forward ran before the optimizer (and so the model) was known: its outputs
    # were summarised then and adopted by the model's modules when it was found
    assert log.activation("fc1", "mean").steps == [0, 10]


def test_losses_are_bit_identical_under_gradoc_run(script: Path, tmp_path: Path) -> None:
    plain = subprocess.run(
        [sys.executable, str(script), "--print"], capture_output=True, text=True, check=True
    )
    watched = gradoc_cli("run", "--out", str(tmp_path / "run"), str(script), "--print")
    assert watched.returncode == 0, watched.stderr
    losses = [line for line in plain.stdout.splitlines() if line.startswith("loss")]
    assert len(losses) == 12
    assert losses == [line for line in watched.stdout.splitlines() if line.startswith("loss")]


def test_run_reports_nonfinite_with_the_step(script: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = gradoc_cli("run", "--out", str(out), str(script), "--nan")
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "problems"
    (finding,) = report["findings"]
    assert finding["kind"] == "nonfinite" and finding["severity"] == "error"
    # the NaN was multiplied into the loss in the training loop: outside the model
    assert finding["step"] == 7 and finding["layer"] is None
    origin = finding["origin"]
    assert origin["phase"] == "forward" and origin["module"] is None
    # born outside the model and never recurring: gradoc re-ran the script to step 7
    assert origin["op"] == "aten.mul.Tensor" and origin["code"] == 'loss = loss * float("nan")'
    assert origin["line"] == TRAIN.splitlines().index('        loss = loss * float("nan")') + 1
    assert "re-ran" in origin["note"]
    assert "loss became nan at step 7" in finding["summary"]
    assert finding["hypotheses"] and finding["root_cause"]
    for shown in ("nonfinite", "hypotheses", "root cause", "fixes", "ruled out"):
        assert shown in done.stderr  # the diagnosis at the end of the run


@pytest.mark.parametrize(("flag", "code"), [("--exit", 3), ("--raise", 1)])
def test_report_is_written_when_the_script_exits_or_raises(
    script: Path, tmp_path: Path, flag: str, code: int
) -> None:
    out = tmp_path / "run"
    done = gradoc_cli("run", "--out", str(out), str(script), flag)
    assert done.returncode == code
    report = json.loads((out / "report.json").read_text())
    assert report["run"]["steps"] == 12 and report["run"]["exit_code"] == code
    if flag == "--raise":
        assert "ValueError: the script itself failed" in done.stderr
        assert "gradoc/" not in done.stderr.split("ValueError")[0]  # only the user's frames


def test_report_command_summarises_and_prints_json(script: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    gradoc_cli("run", "--out", str(out), str(script), "--nan")
    done = gradoc_cli("report", str(out))
    assert done.returncode == 0
    assert "nonfinite" in done.stdout and "fc1.weight" in done.stdout
    as_json = json.loads(gradoc_cli("report", str(out), "--json").stdout)
    assert as_json["findings"][0]["step"] == 7


def test_version() -> None:
    done = gradoc_cli("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"gradoc {gradoc.__version__}"


def _one_line_error(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gradoc: error: "), done.stderr
    for needle in needles:
        assert needle in lines[0]


def test_bad_input_gives_one_clear_line(tmp_path: Path, script: Path) -> None:
    _one_line_error(
        gradoc_cli("run", str(tmp_path / "missing.py")), "script not found", "missing.py"
    )
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\ndef f(:\n    pass\n")
    _one_line_error(gradoc_cli("run", str(broken)), "invalid syntax", "line 2")
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    _one_line_error(gradoc_cli("run", "--out", str(a_file), str(script)), "not a directory")
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "run.db").write_bytes(b"\x00garbage" * 512)
    _one_line_error(gradoc_cli("report", str(corrupt)), "not a readable gradoc run log")
    _one_line_error(gradoc_cli("report", str(tmp_path / "nope")), "no run log")
    _one_line_error(gradoc_cli("demo", "no-such-scenario"), "unknown scenario")


def test_out_that_already_holds_a_run_is_refused(script: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert gradoc_cli("run", "--out", str(out), str(script)).returncode == 0
    _one_line_error(gradoc_cli("run", "--out", str(out), str(script)), "already holds a run log")


def test_unclosed_watch_is_closed_at_exit(tmp_path: Path) -> None:
    code = textwrap.dedent(
        f"""
        import torch, gradoc
        m = torch.nn.Linear(2, 1); o = torch.optim.SGD(m.parameters(), lr=0.1)
        gradoc.watch(m, o, out={str(tmp_path / "run")!r})
        for _ in range(4):
            o.zero_grad(); m(torch.randn(3, 2)).sum().backward(); o.step()
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["run"]["steps"] == 4 and report["run"]["status"] == "exited"


def test_demo_diagnoses_the_nan(tmp_path: Path) -> None:
    from gradoc.demo import nan_posenc

    done = gradoc_cli("demo", "--out", str(tmp_path / "demo"))
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "demo" / "report.json").read_text())
    (finding,) = [f for f in report["findings"] if f["severity"] != "info"]
    assert finding["kind"] == "nonfinite" and report["run"]["guard"]["skipped"] > 0
    origin = finding["origin"]
    source = Path(nan_posenc.__file__).read_text().splitlines()
    bug_line = next(i for i, text in enumerate(source, 1) if "rel = pos / span" in text)
    assert (origin["module"], origin["op"], origin["phase"]) == (
        "pos_encoding",
        "aten.div.Tensor",
        "forward",
    )
    assert origin["file"] == nan_posenc.__file__ and origin["line"] == bug_line
    evidence = {e["signal"]: e["value"] for e in origin["evidence"]}
    assert evidence["`lengths` of the samples where the value was born"] == [1]
    assert evidence["zeros in the denominator"] >= 1
    ruled = {r["cause"] for r in finding["ruled_out"]}
    assert {"learning rate too high", "overfitting or data drift"} <= ruled
    assert [f["horizon"] for f in finding["fixes"]] == ["immediate", "short-term", "long-term"]
    assert "pos_encoding" in finding["fixes"][-1]["action"]
    assert any("`lengths`" in m for m in finding["monitoring"])
    assert "validation accuracy 0.8" in done.stdout
    # the path may be wrapped at the terminal's width (a long temporary directory)
    assert "report.html" in done.stdout.replace("\n", "")
    assert (tmp_path / "demo" / "report.html").exists()

    fixed = gradoc_cli("demo", "--fixed", "--out", str(tmp_path / "fixed"))
    assert fixed.returncode == 0, fixed.stderr
    healthy = json.loads((tmp_path / "fixed" / "report.json").read_text())
    assert healthy["status"] == "healthy" and healthy["run"]["guard"]["skipped"] == 0


GAN = textwrap.dedent(
    """
    import torch, torch.nn as nn

    class Generator(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)
        def forward(self, z):
            return self.fc(z)

    class Critic(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 1)
        def forward(self, x):
            return self.fc(x)

    gen, critic = Generator(), Critic()
    og = torch.optim.Adam(gen.parameters(), 1e-3)
    oc = torch.optim.Adam(critic.parameters(), 1e-3)
    for step in range(5):
        oc.zero_grad()
        critic(gen(torch.randn(8, 4)).detach()).mean().backward()
        oc.step()
        og.zero_grad()
        (-critic(gen(torch.randn(8, 4)))).mean().backward()
        og.step()
    """
)


def test_run_attaches_to_every_optimizer_with_stable_unique_names(tmp_path: Path) -> None:
    script = tmp_path / "gan.py"
    script.write_text(GAN)
    done = gradoc_cli("run", "--out", str(tmp_path / "run"), str(script))
    assert done.returncode == 0, done.stderr
    log = gradoc.open_run(tmp_path / "run")
    # two optimizers: each model is named as the program holds it (its global), the
    # critic's first (its optimizer stepped first), the generator's at its first step
    assert [p.name for p in log.params] == [
        "critic.fc.weight",
        "critic.fc.bias",
        "gen.fc.weight",
        "gen.fc.bias",
    ]
    assert [p.optimizer for p in log.params] == [0, 0, 1, 1]
    assert log.param("gen.fc.weight", "grad_norm").steps == [0, 1, 2, 3, 4]  # its own count
    assert log.num_steps == 5


GLOBAL_HOOKS = """
import torch, torch.nn as nn
from torch.nn.modules import module as M

def hooks():
    return len(M._global_forward_pre_hooks) + len(M._global_forward_hooks)

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
second = None
for step in range(16):
    if step == 12:  # a second model and optimizer, made mid-run
        head = nn.Linear(4, 1)
        second = torch.optim.SGD(head.parameters(), lr=0.01)
    if step in (5, 11, 15):
        print("hooks", step, hooks())
    loss = model(torch.randn(8, 4)).pow(2).mean()
    if second is not None:
        loss = loss + head(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if second is not None:
        second.step()
print("hooks", "end", hooks())
"""


def test_gradoc_run_leaves_the_module_call_path_once_its_models_are_known(
    tmp_path: Path,
) -> None:
    """Before the model is known, global hooks see every module call (the slow path of
    every call in the process); once every optimizer's model is known none is left on the
    steps that collect no activations, and a new optimizer is looked for again."""
    path = tmp_path / "train.py"
    path.write_text(GLOBAL_HOOKS)
    done = gradoc_cli("run", "--out", str(tmp_path / "run"), str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    seen = dict(line.split()[1:] for line in done.stdout.splitlines() if line.startswith("hooks"))
    assert seen["5"] == "0" and seen["11"] == "0"  # the model found at step 0's optimizer
    assert seen["15"] == "0"  # the second one found at its first step (13)
    log = gradoc.open_run(tmp_path / "run")
    assert log.num_steps == 16 and len(log.params) == 4 + 2  # both models watched
