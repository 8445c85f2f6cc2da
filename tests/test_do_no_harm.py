"""First, do no harm: under gradoc the user's program computes, writes, prints and exits
as it does without it. Each test reproduces a failure seen on programs nobody here wrote."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import pickle
import re
import resource
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import gradoc
from tests.test_cli import TRAIN, gradoc_cli


def _train(model: nn.Module, opt: torch.optim.Optimizer, steps: int) -> None:
    for _ in range(steps):
        x = torch.randn(8, 4)
        loss = F.mse_loss(model(x), x.sum(1, keepdim=True))
        opt.zero_grad()
        loss.backward()
        opt.step()


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))


# -- pickle, deepcopy, torch.save -----------------------------------------------------------
@pytest.mark.parametrize("guard", [False, True])
def test_a_watched_model_and_optimizer_pickle_copy_and_save_as_unwatched(
    tmp_path: Path, guard: bool
) -> None:
    """`torch.save(model)` failed with "cannot pickle 'sqlite3.Connection'"."""
    model, plain = _mlp(), _mlp()
    plain.load_state_dict(model.state_dict())
    opt = torch.optim.Adam(model.parameters(), 1e-3)
    with gradoc.watch(model, opt, out=tmp_path / "run", guard=guard, activations=1) as run:
        for step in range(3):  # activation statistics are armed between steps too
            _train(model, opt, 1)
            for obj in (model, opt):
                pickle.loads(pickle.dumps(obj))
                copy.deepcopy(obj)
                torch.save(obj, io.BytesIO())
            saved = tmp_path / f"model{step}.pt"
            torch.save(model, saved)
            clone = copy.deepcopy(model)
            # what was saved and copied carries nothing of gradoc
            for m in (clone, torch.load(saved, weights_only=False)):
                for sub in m.modules():
                    assert not sub._forward_hooks and not sub._forward_pre_hooks
                    assert type(sub._forward_hooks) is type(plain._forward_hooks)
        assert model.state_dict().keys() == plain.state_dict().keys()
        assert opt.state_dict()["param_groups"][0].keys() == {
            *torch.optim.Adam(plain.parameters(), 1e-3).state_dict()["param_groups"][0].keys()
        }
        # a deepcopy (an EMA model) is not the watched model: its forward is not recorded
        model(torch.randn(2, 4))
        clone(torch.randn(2, 4))
        assert run.watched.last_forward is not None and run.watched.last_forward[0] is model


def test_a_model_that_already_has_hooks_keeps_them_removable_and_picklable(
    tmp_path: Path,
) -> None:
    model = _mlp()
    seen: list[int] = []
    handle = model.register_forward_pre_hook(_count_calls(seen))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradoc.watch(model, opt, out=tmp_path / "run") as run:
        _train(model, opt, 3)
        restored = pickle.loads(pickle.dumps(model))
        assert len(restored._forward_pre_hooks) == 1  # the user's hook, not gradoc's
    handle.remove()  # the user's handle still removes the user's hook
    assert not model._forward_pre_hooks and len(seen) == 3
    log = gradoc.open_run(run.dir)
    assert log.num_steps == 3 and len(log.scalar("loss")) == 3


class _count_calls:  # a picklable hook (a lambda is not, with gradoc or without)
    def __init__(self, seen: list[int]) -> None:
        self.seen = seen

    def __call__(self, module: nn.Module, args: object) -> None:
        self.seen.append(1)


SAVES = textwrap.dedent(
    """
    import copy, pickle, sys
    import torch, torch.nn as nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    for step in range(12):
        x = torch.randn(16, 4)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        torch.save(model, sys.argv[1])
        torch.save(opt, sys.argv[1] + ".opt")
        ema = copy.deepcopy(model)
        pickle.dumps(opt)
    saved = torch.load(sys.argv[1], weights_only=False)
    print("saved", sum(p.sum().item() for p in saved.parameters()))
    """
)


def test_torch_save_of_the_model_works_under_gradoc_run(tmp_path: Path) -> None:
    script = tmp_path / "saves.py"
    script.write_text(SAVES)
    plain = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "plain.pt")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    watched = gradoc_cli("run", "--out", str(tmp_path / "run"), str(script), str(tmp_path / "w.pt"))
    assert plain.returncode == watched.returncode == 0, watched.stderr
    assert watched.stdout == plain.stdout  # the same numbers, printed the same way
    # the saved model loads where gradoc is not even importable
    load = "import sys, torch; m = torch.load(sys.argv[1], weights_only=False); print(len(m))"
    done = subprocess.run(
        [sys.executable, "-I", "-c", load, str(tmp_path / "w.pt")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "3", done.stderr
    assert gradoc.open_run(tmp_path / "run").num_steps == 12


# -- re-running a script ----------------------------------------------------------------------
CHECKPOINTS = textwrap.dedent(
    """
    import sys, torch, torch.nn as nn
    torch.manual_seed(0)
    if "--read-up" in sys.argv:
        open("../up.txt").read()  # its data, by a relative path out of its folder
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(12):
        x = torch.randn(16, 4)
        loss = ((model(x) - 1) ** 2).mean()
        if step == 7 and "--nan" in sys.argv:
            loss = loss * float("nan")
        if step == 7 and "--error" in sys.argv:
            raise ValueError("the data loader broke")
        opt.zero_grad(); loss.backward(); opt.step()
        if "--save" in sys.argv:
            torch.save({"step": step}, "latest.pt")   # C++ writes it: no audit hook sees it
        if "--log" in sys.argv:
            with open(sys.argv[-1] if "--log-to" in sys.argv else "train.log", "a") as f:
                f.write(f"step {step}\\n")
    print("done")
    """
)


def _checkpoints(tmp_path: Path) -> Path:
    script = tmp_path / "ckpt.py"
    script.write_text(CHECKPOINTS)
    return script


@pytest.mark.parametrize("effect", ["--save", "--log"])
def test_a_script_that_writes_in_its_folder_is_re_run_in_a_copy(
    tmp_path: Path, effect: str
) -> None:
    """A replay in place set a resume checkpoint back from step 280 to step 220. A script
    whose writes stay in its folder (relative paths) is re-run in a copy of that folder: the
    origin is found, named by the user's file, and the user's files are as the run left
    them."""
    script = _checkpoints(tmp_path)
    done = gradoc_cli("run", "--out", "run", str(script), "--nan", effect, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    wrote = "latest.pt" if effect == "--save" else "train.log"
    said = " ".join(done.stderr.split())
    assert f"up to step 7 in a copy of {tmp_path} (it wrote {tmp_path / wrote} there" in said
    if effect == "--save":
        assert torch.load(tmp_path / "latest.pt") == {"step": 11}  # the run's, not a replay's
    else:
        assert (tmp_path / "train.log").read_text().count("step") == 12  # appended once
    origin = json.loads((tmp_path / "run" / "report.json").read_text())["findings"][0]["origin"]
    assert origin["code"] == 'loss = loss * float("nan")' and "re-ran" in origin["note"]
    assert origin["file"] == str(script)  # the user's file, not the copy's


def test_a_script_that_writes_outside_its_folder_is_not_re_run_but_the_command_is_printed(
    tmp_path: Path,
) -> None:
    project, elsewhere = tmp_path / "project", tmp_path / "logs"
    project.mkdir()
    elsewhere.mkdir()
    script = _checkpoints(project)
    log = elsewhere / "train.log"
    argv = ["run", "--out", "run", str(script), "--nan", "--log", "--log-to", str(log)]
    done = gradoc_cli(*argv, cwd=project)
    assert done.returncode == 0, done.stderr
    assert "gradoc: re-running" not in done.stderr
    line = next(x for x in done.stderr.splitlines() if "not re-running" in x)
    assert str(log) in line and f"outside {project}" in line
    assert line.endswith("To re-run it up to step 7: gradoc replay run")
    assert log.read_text().count("step") == 12  # appended once
    report = json.loads((project / "run" / "report.json").read_text())
    assert not (report["findings"][0].get("origin") or {}).get("file")  # not located
    # the printed command does it, when the user asks for it
    replayed = gradoc_cli("replay", "run", cwd=project)
    assert replayed.returncode == 0, replayed.stderr
    assert "side effects up to that step happen again" in replayed.stderr
    origin = json.loads((project / "run" / "report.json").read_text())["findings"][0]["origin"]
    assert origin["code"] == 'loss = loss * float("nan")' and "re-ran" in origin["note"]


def test_a_script_that_reads_its_data_above_its_folder_is_re_run_in_a_copy_linking_it(
    tmp_path: Path,
) -> None:
    """``../up.txt`` read: the copy links it (no copy of it, no write to it), the replay
    finds the origin, and the user's log is appended to once."""
    project = tmp_path / "project"
    project.mkdir()
    (tmp_path / "up.txt").write_text("data")
    script = _checkpoints(project)
    argv = ["run", "--out", "run", str(script), "--nan", "--log", "--read-up"]
    done = gradoc_cli(*argv, cwd=project)
    assert done.returncode == 0, done.stderr
    assert "up to step 7 in a copy of" in " ".join(done.stderr.split())
    origin = json.loads((project / "run" / "report.json").read_text())["findings"][0]["origin"]
    assert origin["code"] == 'loss = loss * float("nan")'
    assert (project / "train.log").read_text().count("step") == 12  # appended once
    assert sorted(p.name for p in tmp_path.iterdir()) == ["project", "up.txt"]
    assert (tmp_path / "up.txt").read_text() == "data"


def test_a_script_that_writes_above_its_folder_by_a_relative_path_is_not_re_run(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    script = _checkpoints(project)
    argv = ["run", "--out", "run", str(script), "--nan", "--log", "--log-to", "../up.log"]
    done = gradoc_cli(*argv, cwd=project)
    assert done.returncode == 0, done.stderr
    assert "gradoc: re-running" not in done.stderr
    line = next(x for x in done.stderr.splitlines() if "not re-running" in x)
    assert "up.log" in line
    assert line.endswith("To re-run it up to step 7: gradoc replay run")
    assert (tmp_path / "up.log").read_text().count("step") == 12  # appended once


def test_run_replay_re_runs_despite_side_effects_when_asked(tmp_path: Path) -> None:
    script = _checkpoints(tmp_path)
    done = gradoc_cli(
        "run", "--replay", "--out", "run", str(script), "--nan", "--log", cwd=tmp_path
    )
    assert done.returncode == 0 and "re-running ckpt.py up to step 7" in done.stderr
    origin = json.loads((tmp_path / "run" / "report.json").read_text())["findings"][0]["origin"]
    assert origin["op"] == "aten.mul.Tensor"


def test_an_ordinary_error_never_triggers_a_replay(tmp_path: Path) -> None:
    script = _checkpoints(tmp_path)
    done = gradoc_cli("run", "--out", "run", str(script), "--error", cwd=tmp_path)
    assert done.returncode == 1
    assert "ValueError: the data loader broke" in done.stderr
    assert "NaN" not in done.stderr and "replay" not in done.stderr


def _stops_at_nan(tmp_path: Path, *options: str, slow: bool = False) -> tuple[Any, Path]:
    """Run a script that stops at its own NaN check under ``gradoc run`` with a private
    temporary folder: the run, and that folder."""
    script = tmp_path / "check.py"
    script.write_text(
        TRAIN.replace(
            "    opt.zero_grad(); loss.backward(); opt.step()",
            "    if not torch.isfinite(loss):\n"
            "        sys.exit(4)\n"
            "    opt.zero_grad(); loss.backward(); opt.step()"
            + ("\n    __import__('time').sleep(1.0)" if slow else ""),
        )
    )
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    # gradoc's own outputs (--json next to the script) are not the script's side effects
    argv = ["run", "--out", "run", "--json", "r.json", *options, "check.py", "--nan"]
    done = subprocess.run(
        [sys.executable, "-m", "gradoc", *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    return done, scratch


def test_a_script_stopping_at_a_nan_check_is_replayed_when_it_wrote_nothing(
    tmp_path: Path,
) -> None:
    done, scratch = _stops_at_nan(tmp_path)
    assert done.returncode == 4  # the script's own exit code
    assert "re-running check.py up to step 7" in done.stderr
    origin = json.loads((tmp_path / "r.json").read_text())["findings"][0]["origin"]
    assert origin["code"] == 'loss = loss * float("nan")'
    # the replay's own run log is not left behind (torch itself makes torchinductor_*)
    assert list(scratch.glob("gradoc*")) == [] and list(scratch.glob("tmp*")) == []


def test_a_replay_killed_at_its_budget_leaves_nothing_behind(tmp_path: Path) -> None:
    done, scratch = _stops_at_nan(tmp_path, "--replay-budget", "4", slow=True)
    assert done.returncode == 4
    with gradoc.open_run(tmp_path / "run") as log:
        assert any(e.kind == "replay_timeout" for e in log.events)
    assert list(scratch.glob("gradoc*")) == [] and list(scratch.glob("tmp*")) == []


def test_the_replay_budget_is_checked(script_path: Path) -> None:
    for bad in ("-1", "nan", "inf", "x"):
        done = gradoc_cli("run", "--replay-budget", bad, str(script_path))
        assert done.returncode == 2 and "--replay-budget" in done.stderr
        assert "argv" not in done.stdout  # the script never started
    done = gradoc_cli("checkpoint-plan", "--repeats", "0", str(script_path))
    assert done.returncode == 2 and "--repeats: must be 1 or more" in done.stderr


@pytest.fixture
def script_path(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(TRAIN)
    return path


# -- changing directory -------------------------------------------------------------------
CHDIR = textwrap.dedent(
    """
    import os, sys, torch, torch.nn as nn
    print("file", __file__)
    os.makedirs("elsewhere", exist_ok=True)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(6):
        if step == 2:
            os.chdir("elsewhere")    # Hydra's hydra.job.chdir=True does this
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
    """
)


def test_a_script_that_changes_directory_keeps_its_run(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    script = tmp_path / "sub" / "chdir.py"
    script.write_text(CHDIR)
    plain = subprocess.run(
        [sys.executable, "sub/chdir.py"], cwd=tmp_path, capture_output=True, text=True
    )
    done = gradoc_cli("run", "--out", "run", "--json", "r.json", "sub/chdir.py", cwd=tmp_path)
    assert done.returncode == 0 and "no run log" not in done.stderr, done.stderr
    assert done.stdout == plain.stdout  # __file__ absolute, as under python
    assert json.loads((tmp_path / "r.json").read_text())["run"]["steps"] == 6
    assert (tmp_path / "run" / "report.json").exists()
    assert not (tmp_path / "elsewhere" / "run").exists()


def test_watch_with_a_relative_out_survives_chdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradoc.watch(model, opt, out="rel") as run:
        _train_linear(model, opt)
        os.chdir("elsewhere")
    assert run.dir == tmp_path / "rel"
    assert json.loads((tmp_path / "rel" / "report.json").read_text())["run"]["steps"] == 3


def _train_linear(model: nn.Module, opt: torch.optim.Optimizer) -> None:
    for _ in range(3):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


# -- names with markup and escape sequences ---------------------------------------------------
HOSTILE_NAMES = textwrap.dedent(
    """
    import sys, torch, torch.nn as nn
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("[/INST]", nn.Linear(4, 16))
    model.add_module("[red]x", nn.ReLU())
    model.add_module("\\x1b]52;c;ZXZpbA==\\x07", nn.Linear(16, 1))
    model.add_module("\\x1b[2J", nn.Identity())
    with torch.no_grad():
        getattr(model, "[/INST]").bias.fill_(-10.0)   # every unit of [red]x is dead
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(120):
        x = torch.randn(32, 4)
        loss = (model(x) - 1).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
    sys.exit(5)
    """
)


def test_names_with_rich_markup_and_escape_sequences_print_as_text(tmp_path: Path) -> None:
    script = tmp_path / "names.py"
    script.write_text(HOSTILE_NAMES)
    done = gradoc_cli("run", "--out", str(tmp_path / "run"), str(script))
    assert done.returncode == 5, done.stderr  # the script's code, not 70
    report = gradoc_cli("report", str(tmp_path / "run"))
    assert report.returncode == 0, report.stderr
    for text in (done.stderr, report.stdout):
        assert "\x1b" not in text and "\x07" not in text  # nothing reaches the terminal raw
        assert "dead_units at step" in text and "in [red]x:" in text  # markup shown as text
        assert "[/INST].weight" in text and "\\x1b]52;c;ZXZpbA==\\x07.bias" in text


def test_terminal_rendering_escapes_user_text_even_on_a_colour_terminal(tmp_path: Path) -> None:
    from rich.console import Console

    from gradoc.analysis import analyze
    from gradoc.report import print_summary

    model = nn.Sequential()
    model.add_module("\x1b[2J[bold]", nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradoc.watch(model, opt, out=tmp_path / "run"):
        _train_linear(model, opt)
    buf = io.StringIO()
    with gradoc.open_run(tmp_path / "run") as log:
        print_summary(log, analyze(log), Console(file=buf, force_terminal=True, width=120))
    text = buf.getvalue()
    assert "\x1b[2J" not in text and "\\x1b[2J[bold].weight" in re.sub(r"\x1b\[[0-9;]*m", "", text)


# -- output paths ---------------------------------------------------------------------------
def _one_line_usage_error(done: subprocess.CompletedProcess[str], needle: str) -> None:
    assert done.returncode == 2, done.stderr
    assert "argv" not in done.stdout, "the script must not start"
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("gradoc: error: ") and needle in line, line


def test_output_paths_are_checked_before_the_script_starts(
    tmp_path: Path, script_path: Path
) -> None:
    source = script_path.read_bytes()
    (tmp_path / "adir").mkdir()
    cases = [
        (["--json", str(tmp_path / "adir")], "is a directory"),
        (["--json", str(tmp_path / "nodir" / "r.json")], "does not exist"),
        (["--json", str(script_path)], "that is the script"),
        (["--json", str(tmp_path / "other.py")], "Python source file"),
        (["--out", str(tmp_path / "o"), "--json", str(tmp_path / "o")], "the run directory"),
        (["--out", str(tmp_path / "o"), "--json", str(tmp_path / "o" / "run.db")], "run log"),
    ]
    if os.geteuid() == 0:  # root writes everywhere a permission allows: sysfs refuses
        cases.append((["--json", "/sys/gradoc.json"], "cannot write in /sys"))
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        cases.append((["--json", str(locked / "r.json")], "cannot write in"))
    for flags, needle in cases:
        _one_line_usage_error(gradoc_cli("run", *flags, str(script_path)), needle)
    assert script_path.read_bytes() == source
    # a run log is never written over by a report
    assert gradoc_cli("run", "--out", str(tmp_path / "run"), str(script_path)).returncode == 0
    log = tmp_path / "run" / "run.db"
    before = log.read_bytes()
    done = gradoc_cli("report", str(tmp_path / "run"), "--html", str(log))
    assert done.returncode == 2 and "that is the run log" in done.stderr
    done = gradoc_cli("report", str(tmp_path / "run"), "--html", str(script_path))
    assert done.returncode == 2 and "that is" not in done.stderr and "source file" in done.stderr
    assert log.read_bytes() == before and script_path.read_bytes() == source


def test_a_full_disk_for_the_json_keeps_the_scripts_exit_code(
    tmp_path: Path, script_path: Path
) -> None:
    if not Path("/dev/full").is_char_device():
        pytest.skip("/dev/full is not the full device here")
    out = str(tmp_path / "run")
    done = gradoc_cli("run", "--out", out, "--json", "/dev/full", str(script_path), "--exit")
    assert done.returncode == 3, done.stderr  # the script's sys.exit(3), not 70
    assert "gradoc: could not write /dev/full: No space left on device" in done.stderr
    assert (tmp_path / "run" / "report.json").exists()
    # written in place: a device is never replaced by a file (gradoc once did that)
    assert Path("/dev/full").is_char_device()


LONG = textwrap.dedent(
    """
    import sys, torch, torch.nn as nn
    model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(8)])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for step in range(400):
        loss = model(torch.randn(4, 64)).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
    print("trained to the end")
    sys.exit(6)
    """
)


@contextlib.contextmanager
def _small_disk(path: Path, size: str) -> Iterator[tuple[Path, Any]]:
    """A directory on a disk that fills: a small tmpfs where this user may mount one (the
    report's files fail too), else a file-size limit (the run log's writes fail)."""
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    if mounted.returncode == 0:
        try:
            yield path, None
        finally:
            subprocess.run(["umount", str(path)], check=False)
        return

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))

    yield path, limit


def test_a_disk_that_fills_mid_run_keeps_training_and_the_exit_code(tmp_path: Path) -> None:
    """The script trained to the end, then gradoc exited 70 and lost its exit code."""
    script = tmp_path / "long.py"
    script.write_text(LONG)
    with _small_disk(tmp_path / "disk", "300k") as (disk, limit):
        done = subprocess.run(
            [sys.executable, "-m", "gradoc", "run", "--out", str(disk / "run"), str(script)],
            capture_output=True,
            text=True,
            timeout=300,
            preexec_fn=limit,
        )
        left = sorted(os.listdir(disk / "run"))
    assert done.returncode == 6, done.stderr  # the script's sys.exit(6)
    assert "trained to the end" in done.stdout
    said = [x for x in done.stderr.splitlines() if x.startswith("gradoc: run log")]
    assert len(said) == 1 and "stopped recording" in said[0], done.stderr  # said once
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert not [name for name in left if name.endswith(".tmp")]  # no half-written files
    # what was not watched is said, and the run is never called healthy (a finding's own
    # text may name a healthy range: this script's update/weight ratio is ~5e-7, and
    # whether "learning rate too low" fires depends on how many steps the log kept)
    assert "log_incomplete" in done.stderr, done.stderr
    assert "gradoc healthy" not in done.stderr and "gradoc problems found" in done.stderr


def test_a_path_that_is_not_utf8_works(tmp_path: Path, script_path: Path) -> None:
    out = os.fsdecode(os.fsencode(str(tmp_path)) + b"/run-\xff")
    done = gradoc_cli("run", "--out", out, str(script_path))
    assert done.returncode == 0, done.stderr
    names = sorted(os.listdir(out))
    assert names == ["report.html", "report.json", "run.db"]  # no stray report.html.tmp
    assert gradoc_cli("report", out).returncode == 0


# -- untrusted run directories --------------------------------------------------------------
def test_reports_show_the_source_recorded_at_run_time_and_never_open_a_path_from_the_log(
    tmp_path: Path, script_path: Path
) -> None:
    import sqlite3

    out = tmp_path / "run"
    assert gradoc_cli("run", "--out", str(out), str(script_path), "--nan").returncode == 0
    script_path.write_text("# the script changed after the run\n" * 40)
    page = tmp_path / "page.html"
    assert gradoc_cli("report", str(out), "--html", str(page)).returncode == 0
    assert "loss = loss * float(&quot;nan&quot;)" in page.read_text()  # as it was
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-LINE\n" * 5)
    for target in (str(secret), "/dev/zero"):
        conn = sqlite3.connect(out / "run.db")
        query = "SELECT id, data FROM events WHERE data LIKE '%origin%'"
        for rowid, data in conn.execute(query).fetchall():
            d = json.loads(data)
            d["origin"].update(file=target, line=2, source=None)
            conn.execute("UPDATE events SET data=? WHERE id=?", (json.dumps(d), rowid))
        conn.commit()
        conn.close()
        done = gradoc_cli("report", str(out), "--html", str(page))  # /dev/zero: never read
        assert done.returncode == 0, done.stderr
        assert target in page.read_text() and "TOP-SECRET" not in page.read_text()


# -- tracebacks, warnings, interrupts ---------------------------------------------------------
def test_a_scripts_traceback_is_the_one_python_prints(tmp_path: Path) -> None:
    script = tmp_path / "fails.py"
    script.write_text("def f():\n    raise ValueError('x')\n\nf()\n")
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    done = gradoc_cli("run", "--out", str(tmp_path / "run"), str(script))
    assert done.returncode == plain.returncode == 1
    assert "<frozen runpy>" not in done.stderr
    assert done.stderr.startswith(plain.stderr)  # then gradoc's own lines


GLYPHS = textwrap.dedent(
    """
    import torch, torch.nn as nn
    from collections import OrderedDict
    layers = [("层\U0001f600", nn.Linear(4, 8)), ("act", nn.ReLU()), ("out", nn.Linear(8, 1))]
    model = nn.Sequential(OrderedDict(layers))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(30):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
    """
)


def test_chart_warnings_stay_out_of_the_users_stderr(tmp_path: Path) -> None:
    script = tmp_path / "glyphs.py"
    script.write_text(GLYPHS)
    done = gradoc_cli("run", "--out", str(tmp_path / "run"), str(script))
    assert done.returncode == 0, done.stderr
    assert "层" in (tmp_path / "run" / "report.html").read_text()  # the name is on the page
    assert "Glyph" not in done.stderr and "missing from" not in done.stderr


def test_ctrl_c_during_close_leaves_a_complete_log_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    run = gradoc.watch(model, opt, out=tmp_path / "run")
    _train(model, opt, 4)
    original = run._writer.close

    def interrupted_close() -> None:  # Ctrl-C while the log is being completed
        signal.raise_signal(signal.SIGINT)
        original()

    monkeypatch.setattr(run._writer, "close", interrupted_close)
    with pytest.raises(KeyboardInterrupt):
        run.close()
    assert "the run log is complete" in capsys.readouterr().err
    log = gradoc.open_run(tmp_path / "run")
    assert log.meta["status"] == "finished" and log.num_steps == 4


def test_side_effects_are_what_a_re_run_would_repeat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket
    import tempfile

    from gradoc.runtime.effects import SideEffects

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    allowed, cache = tmp_path / "run", tmp_path / "xdg" / "huggingface"
    allowed.mkdir()
    with SideEffects([allowed]) as fx:
        (allowed / "inside.txt").write_text("x")  # the run directory: gradoc's own
        fd, name = tempfile.mkstemp(dir=tmp_path)  # a temporary file, removed again
        os.close(fd)
        os.unlink(name)
        tmp = tmp_path / "ckpt.tmp"
        tmp.write_bytes(b"x")
        os.replace(tmp, tmp_path / "ckpt.pt")  # atomic save: one file left behind
        cache.mkdir(parents=True, exist_ok=True)  # a cache
        os.makedirs(tmp_path, exist_ok=True)  # a directory already there
    assert fx.seen == [f"wrote {tmp_path / 'ckpt.pt'}"]
    with SideEffects([allowed]) as fx:
        with contextlib.suppress(OSError), socket.socket() as s:
            s.settimeout(0.2)
            s.connect(("127.0.0.1", 9))
        subprocess.run(["true"], check=True)
        with open(tmp_path / "log.txt", "a") as f:
            f.write("appended\n")
    assert fx.count == 3 and "used the network (('127.0.0.1', 9))" in fx.seen
    assert any(s.startswith("started a process") for s in fx.seen)
    assert f"wrote {tmp_path / 'log.txt'}" in fx.seen
    with SideEffects([allowed]) as fx:
        (tmp_path / "late.pt").write_bytes(b"")  # what torch.save does from C++ ...
    fx._effects.clear()  # ... which no audit hook sees: the scan finds it
    fx.scan(since=0.0, roots=[str(tmp_path)])
    assert f"wrote {tmp_path / 'late.pt'}" in fx.seen


def test_a_script_saved_just_before_the_run_is_not_a_file_the_run_wrote(tmp_path: Path) -> None:
    """Edit, save, ``gradoc run``: the script's own stamp, a moment before the run began,
    must not read as a write (the replay would be refused); a coarse stamp keeps its slack."""
    from gradoc.runtime.effects import SideEffects

    started = time.time()
    stamps = {
        "saved_before.py": started - 0.4,  # saved 0.4 s before the run: not the run's
        "written_during.pt": started + 0.01,  # torch.save from C++: the run's
        "coarse.pt": float(int(started)),  # whole seconds (FAT, ext3): may be the run's
    }
    for name, stamp in stamps.items():
        (tmp_path / name).write_bytes(b"x")
        os.utime(tmp_path / name, ns=(int(stamp * 1e9),) * 2)
    fx = SideEffects([])
    fx.scan(since=started, roots=[str(tmp_path)])
    assert sorted(fx.seen) == [
        f"wrote {tmp_path / 'coarse.pt'}",
        f"wrote {tmp_path / 'written_during.pt'}",
    ]


def test_a_process_a_library_starts_only_to_read_is_no_side_effect(tmp_path: Path) -> None:
    """matplotlib runs ``fc-list`` to build its font cache, libraries ask ``nvidia-smi`` and
    ``git describe``: none of them changes anything a re-run would repeat (issue 46, item 6).
    ``git init`` does."""
    from gradoc.runtime.effects import SideEffects

    with SideEffects([tmp_path / "run"]) as fx:
        subprocess.run(["uname", "-a"], capture_output=True, check=True)
        subprocess.run(["git", "describe"], capture_output=True, cwd=tmp_path, check=False)
        with contextlib.suppress(OSError):
            subprocess.run(["fc-list"], capture_output=True, check=False)
        os.system("nproc > /dev/null")
    assert fx.seen == [], fx.seen
    with SideEffects([tmp_path / "run"]) as fx:
        subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True)
    assert any(s.startswith("started a process") for s in fx.seen), fx.seen


def test_a_forward_that_raises_leaves_the_early_calls_whole() -> None:
    """torch calls a global forward hook with ``always_call`` without its kwargs when the
    forward raised (``Module._call_impl``): gradoc's hook takes that call, so no warning is
    raised into the program and the next outermost call is still recorded."""
    import warnings

    from gradoc.collect.auto import EarlyCalls

    class Boom(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("a batch the program skips")

    early = EarlyCalls()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a program whose filters make warnings errors
            with pytest.raises(ValueError, match="skips"):
                Boom()(torch.ones(2))
            torch.nn.Linear(2, 2)(torch.ones(2))
        assert early._depth == 0
        assert [type(c[0]).__name__ for c in early.calls] == ["Boom", "Linear"]
    finally:
        early.remove()
