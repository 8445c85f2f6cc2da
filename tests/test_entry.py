"""No failure of gradoc reaches the program: every place PyTorch or the program calls into
gradoc goes through ``gradoc._util.entry``, and gradoc reads the program's objects only as
PyTorch keeps them (``gradoc._util.objects``).

Three kinds of test: the source is read for a hook registered, a signal or exit handler
set, a dispatch mode made, or a module method called anywhere but in the guard; each entry
a run registers is made to fail in turn (before and after its work) and the program's
output must not change; the guard's semantics (a wrapped call made exactly once, its own
exception kept) on small functions.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import pickle
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import gradoc
from gradoc._util import entry, objects
from gradoc._util.patch import Patch
from gradoc.report import Report

SRC = Path(gradoc.__file__).parent
ENTRY = SRC / "_util" / "entry.py"

# -- the source: every entry point goes through the guard ---------------------------------
HOOK_NAMES = {"saved_tensors_hooks", "register_multi_grad_hook", "register_prehook"}
"""Calls that register a callback PyTorch makes, besides ``register_*hook*``."""
PROCESS = {("signal", "signal"), ("atexit", "register"), ("sys", "settrace"), ("sys", "setprofile")}
"""``module.function`` calls that hand the interpreter a callback."""
PROCESS_ATTRS = {("sys", "excepthook"), ("threading", "excepthook"), ("sys", "displayhook")}
MODES = {"TorchDispatchMode", "TorchFunctionMode"}


def bypasses(source: str, path: str) -> list[str]:
    """The places in ``source`` that hand PyTorch or the interpreter a callback of gradoc's
    without the guard: ``path:line: what``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        what = None
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            owner = (
                f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ""
            )
            hook = (name.startswith("register_") and "hook" in name) or name in HOOK_NAMES
            if hook and owner != "entry":  # entry.saved_tensors_hooks: the guard's own
                what = f"{name}()"
            elif (owner, name) in PROCESS:
                what = f"{owner}.{name}()"
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            for d in node.decorator_list if isinstance(node, ast.FunctionDef) else node.bases:
                text = ast.unparse(d)
                if text == "atexit.register" or text.split(".")[-1] in MODES:
                    what = text
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if not (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)):
                    continue
                if (t.value.id, t.attr) in PROCESS_ATTRS:
                    what = f"{t.value.id}.{t.attr} ="
        if what is not None:
            found.append(f"{path}:{node.lineno}: {what}")
    return found


def test_every_hook_of_gradoc_is_registered_through_the_guard() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path != ENTRY:
            found += bypasses(path.read_text(), str(path.relative_to(SRC)))
    assert not found, "registered without gradoc._util.entry's guard:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        "m.register_forward_hook(f)",
        "torch.nn.modules.module.register_module_forward_pre_hook(f)",
        "opt.register_step_post_hook(lambda o, a, k: None)",
        "t.register_hook(g.append)",
        "node.register_prehook(f)",
        "signal.signal(signal.SIGTERM, handler)",
        "atexit.register(close)",
        "@atexit.register\ndef close(): pass",
        "sys.excepthook = hook",
        "class Mode(TorchDispatchMode): pass",
        "with torch.autograd.graph.saved_tensors_hooks(pack, unpack): pass",
    ],
)
def test_the_bypass_check_sees_each_kind_of_registration(source: str) -> None:
    assert bypasses(source, "x.py"), source


MODULE_METHODS = {
    "modules", "named_modules", "parameters", "named_parameters", "children", "named_children",
    "buffers", "named_buffers", "state_dict", "load_state_dict", "get_submodule",
    "get_parameter", "get_buffer", "zero_grad", "train", "eval",
}  # fmt: skip
"""``nn.Module`` methods a program may shadow with an attribute (``self.modules = []``)."""


def shadowable_calls(source: str, path: str) -> list[str]:
    """Calls of an ``nn.Module`` method through an object (``m.modules()``), not through
    PyTorch's definition (``nn.Module.state_dict(m)``) or ``gradoc._util.objects``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        if not call or node.func.attr not in MODULE_METHODS:  # type: ignore[attr-defined]
            continue
        owner = ast.unparse(node.func.value)  # type: ignore[attr-defined]
        if owner.split(".")[-1] not in {"Module", "Optimizer", "objects"}:
            found.append(f"{path}:{node.lineno}: {owner}.{node.func.attr}()")  # type: ignore[attr-defined]
    return found


def test_gradoc_reads_modules_as_pytorch_keeps_them_not_through_their_attributes() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if "demo" not in path.parts:  # the demo's models are gradoc's own
            found += shadowable_calls(path.read_text(), str(path.relative_to(SRC)))
    assert not found, "through an attribute the program may shadow:\n" + "\n".join(found)
    assert shadowable_calls("model.modules()", "x.py")
    assert not shadowable_calls("nn.Module.state_dict(m); objects.modules(m)", "x.py")


# -- the objects, as PyTorch keeps them --------------------------------------------------
class Shadowing(nn.Module):
    """Every name a program may reuse: a list named modules, a dict named parameters, a
    property named training, an ``__eq__`` (so no hash), a ``__getattr__`` that raises."""

    def __init__(self) -> None:
        super().__init__()
        self.modules = []  # type: ignore[assignment]
        self.parameters = {"lr": 0.1}  # type: ignore[assignment]
        self.children = "kids"  # type: ignore[assignment]
        self.state_dict = None  # type: ignore[assignment]
        self.body = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
        self.shared = self.body[0]
        self.register_buffer("count", torch.zeros(()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Shadowing)

    def __getattr__(self, name: str) -> object:
        if name in {"config", "device"}:
            raise RuntimeError(f"{name} is computed on the GPU")
        return super().__getattr__(name)


def test_objects_walks_a_module_as_pytorch_names_it_whatever_it_shadows() -> None:
    m = Shadowing()
    plain = nn.Module()
    plain.body = m.body
    plain.shared = m.body[0]
    assert [n for n, _ in objects.named_modules(m)] == [n for n, _ in plain.named_modules()]
    assert [n for n, _ in objects.named_parameters(m)] == [n for n, _ in plain.named_parameters()]
    assert [n for n, _ in objects.named_buffers(m)] == ["count"]
    assert objects.children(m) == list(plain.children())
    assert objects.attribute(m, "config") is None and objects.attribute(m, "count") is m.count
    with pytest.raises(TypeError):
        hash(m)
    ids = objects.IdMap([(m, "a"), (Shadowing(), "b")])
    assert len(ids) == 2 and ids[m] == "a" and ids.get(nn.Linear(1, 1)) is None


# -- the guard's semantics ---------------------------------------------------------------
@pytest.fixture
def clean() -> Iterator[None]:
    entry.reset()
    yield
    entry.reset()


def test_a_guarded_hook_that_fails_returns_the_fallback_and_stops_gradoc(
    clean: None, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[int] = []

    def hook(x: int) -> int:
        calls.append(x)
        raise KeyError("oops")

    said: list[str] = []
    entry.on_failure(lambda message, trace: said.append(trace))
    guarded = entry.guard(hook, "test.hook", fallback=-1)
    assert guarded(1) == -1 and guarded(2) == -1  # the second call does nothing
    assert calls == [1] and entry.broken()
    assert "KeyError: 'oops'" in said[-1] and "in hook" in said[-1]  # its traceback
    err = capsys.readouterr().err
    assert err.count("internal error in test.hook") == 1 and "the program goes on" in err
    assert entry.guard(guarded) is guarded  # guarded once


def test_a_deliberate_exception_passes_the_guard(clean: None) -> None:
    class Stop(entry.Deliberate):
        pass

    def hook() -> None:
        raise Stop("the guard gave up")

    with pytest.raises(Stop):
        entry.guard(hook, "test.deliberate")()
    assert not entry.broken()


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_patch_that_fails_calls_the_original_exactly_once(clean: None, when: str) -> None:
    """A failure of gradoc's before or after the call: the program's call is made once and
    its result returned."""
    import types

    calls: list[int] = []

    def f(x: int) -> int:
        calls.append(x)
        return x + 1

    def make(original: object) -> object:
        def tapped(x: int) -> int:
            if when == "before":
                raise ValueError("gradoc, before")
            out = original(x)  # type: ignore[operator]
            raise ValueError(f"gradoc, after {out}")

        return tapped

    lib = types.SimpleNamespace(f=f)
    patch = Patch(lib, "f", make)
    patch.install()
    try:
        assert lib.f(1) == 2 and calls == [1]
        assert lib.f(5) == 6 and calls == [1, 5]  # broken: a pass-through
    finally:
        patch.remove()


def test_a_patched_functions_own_exception_reaches_the_program_unchanged(clean: None) -> None:
    import types

    def f() -> None:
        raise ZeroDivisionError("the program's")

    def make(original: object) -> object:
        def tapped() -> None:
            try:
                original()  # type: ignore[operator]
            finally:
                raise RuntimeError("gradoc's, while the program's passed")

        return tapped

    lib = types.SimpleNamespace(f=f)
    patch = Patch(lib, "f", make)
    patch.install()
    try:
        with pytest.raises(ZeroDivisionError, match="the program's"):
            lib.f()
        assert entry.broken()  # and gradoc's own failure stopped it
    finally:
        patch.remove()


def test_a_hook_on_a_tensor_and_a_node_changes_no_gradient_when_it_fails(clean: None) -> None:
    x = torch.ones(3, requires_grad=True)
    y = (x * 2).sum()

    def bad(g: object) -> None:
        raise RuntimeError("gradoc")

    entry.tensor_hook(x, bad)
    entry.node_prehook(y.grad_fn, bad)
    y.backward()
    assert torch.equal(x.grad, torch.full((3,), 2.0)) and entry.broken()


def test_pickling_a_watched_model_works_when_its_hook_dict_cannot_be_filtered(
    clean: None, tmp_path: Path
) -> None:
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradoc.watch(model, opt, out=tmp_path / "run"):
        hooks = model._forward_hooks
        hooks.ours = None  # type: ignore[attr-defined] # what filters them, broken
        pickle.loads(pickle.dumps(model))  # the hooks left behind, not an error


def test_a_notebook_display_that_fails_falls_back_to_repr(clean: None, tmp_path: Path) -> None:
    from gradoc._util import display

    class Odd(display.Shown):
        pass

    display.register(Odd, lambda obj: 1 / 0)  # type: ignore[arg-type,return-value]
    try:
        assert Odd()._repr_html_() is None
    finally:
        display.RENDERERS.pop(Odd)


# -- every entry of a run, made to fail in turn ---------------------------------------------
PROGRAM = textwrap.dedent(
    """
    import math, torch, torch.nn as nn, torch.nn.functional as F
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Dropout(0.1), nn.Linear(16, 1))
    head = nn.Linear(6, 1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    lbfgs = torch.optim.LBFGS(head.parameters(), lr=0.5, max_iter=3)
    scaler = torch.amp.GradScaler("cpu")
    for step in range(24):
        x = torch.randn(16, 6)
        y = x.sum(1, keepdim=True)
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        torch.nn.utils.clip_grad_value_(model.parameters(), 10.0)
        scaler.step(opt)
        scaler.update()
        def closure():
            lbfgs.zero_grad()
            l = F.mse_loss(head(x), y)
            (g,) = torch.autograd.grad(l, head.weight, create_graph=True)
            (l + 0.01 * g.pow(2).sum()).backward()
            return l
        lbfgs.step(closure)
        if not torch.isfinite(loss) or math.isnan(float(loss)) or loss.isnan():
            break
        print(step, f"{loss:.5f}", round(loss.item(), 5))
    print("done", [round(float(p.sum()), 4) for p in model.parameters()])
    """
)


def _run(script: Path, out: Path | None) -> tuple[int, str]:
    """The program in this process: plain (``out`` None) or as ``gradoc run`` runs it (its
    run log in ``out``, no report written); its exit code and its output."""
    from gradoc.collect import prepare_run_dir
    from gradoc.collect.auto import AutoAttach
    from gradoc.collect.run import Run
    from gradoc.config import WatchConfig
    from gradoc.runtime.replay import seed_everything
    from gradoc.runtime.runner import exec_script

    printed = io.StringIO()
    config = WatchConfig(activations=gradoc.every(3))
    run = Run(prepare_run_dir(out), config) if out is not None else None
    auto = AutoAttach(run) if run is not None else None
    seed_everything()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(io.StringIO()):
        code = exec_script(script, [])
    if auto is not None and run is not None:
        auto.remove()
        run.close(status="finished", exit_code=code)
    return code, printed.getvalue()


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tuple[int, str], list[str]]:
    """The program, its plain run, and the entries a watched run of it registers."""
    folder = tmp_path_factory.mktemp("entries")
    script = folder / "train.py"
    script.write_text(PROGRAM)
    plain = _run(script, None)
    assert plain[0] == 0 and "done" in plain[1]
    before = set(entry.entries())
    watched = _run(script, folder / "reference")
    assert watched == plain
    return script, plain, sorted(set(entry.entries()) | before)


def test_the_reference_run_registers_the_entries_of_every_kind(
    program: tuple[Path, tuple[int, str], list[str]],
) -> None:
    names = program[2]
    for expected in (
        "collect.auto.AutoAttach._pre",
        "collect.step.protocol.Steps.on_backward",
        "collect.step.protocol.closure",
        "patch of torch.autograd.backward",
        "patch of Tensor.item",
        "patch of GradScaler.unscale_",
    ):
        assert expected in names, names


@pytest.mark.parametrize("when", ["before", "after"])
def test_each_entry_that_fails_leaves_the_programs_output_unchanged(
    program: tuple[Path, tuple[int, str], list[str]], tmp_path: Path, when: str
) -> None:
    """Every entry a watched run registered, made to fail (before its work, then after it):
    the program prints and exits exactly as its plain run, and the run log records the
    failure with its traceback."""
    script, plain, names = program
    changed = []
    for i, name in enumerate(names):
        entry.inject(name, when)
        try:
            got = _run(script, tmp_path / f"run{i}")
        finally:
            entry.inject(name, None)
        if got != plain:
            changed.append(f"{name}: exit {got[0]}, output {got[1][-200:]!r}")
            continue
        with gradoc.open_run(tmp_path / f"run{i}") as log:
            failed = [e for e in log.events if e.kind == "internal_error"]
        if failed:
            assert name in failed[0].message and "InjectedFault" in failed[0].data["traceback"]
    assert not changed, "\n".join(changed)


def test_a_failure_is_told_in_the_report_as_monitoring_stopped(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(PROGRAM)
    entry.inject("collect.step.protocol.Steps.post_step", "before")
    try:
        from gradoc.cli import main

        with (
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(err := io.StringIO()),
        ):
            code = main(["run", "--out", str(tmp_path / "run"), str(script)])
    finally:
        entry.inject("collect.step.protocol.Steps.post_step", None)
    assert code == 0
    report = Report.from_json(json.loads((tmp_path / "run" / "report.json").read_text()))
    kinds = [f.kind for f in report.findings]
    assert report.status != "healthy" and "monitoring_stopped" in kinds, kinds
    assert "internal error in collect.step.protocol.Steps.post_step" in err.getvalue()


def test_the_shadowing_program_of_the_issue_trains_under_gradoc(tmp_path: Path) -> None:
    """A RealNVP flow's `self.modules = []`: gradoc's optimizer hook called it and killed
    the program at its first step."""
    script = tmp_path / "flow.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch, torch.nn as nn
            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.modules = []                      # shadows nn.Module.modules()
                    self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 1)])
                    self.modules.extend(self.layers)
                def forward(self, x):
                    for m in self.modules: x = m(x)
                    return x
            torch.manual_seed(0)
            net = Net()
            opt = torch.optim.SGD(nn.Module.parameters(net), lr=0.05)
            for i in range(30):
                x = torch.randn(8, 4)
                loss = ((net(x) - x.sum(1, keepdim=True)) ** 2).mean()
                opt.zero_grad(); loss.backward(); opt.step()
            print("final", round(loss.item(), 4))
            """
        )
    )
    plain = _run(script, None)
    watched = _run(script, tmp_path / "run")
    assert watched == plain and plain[0] == 0
    with gradoc.open_run(tmp_path / "run") as log:
        assert log.num_steps == 30 and not [e for e in log.events if e.kind == "internal_error"]
        assert any(p.name.endswith("layers.0.weight") for p in log.params)


def test_gradients_into_keeps_the_gradient_reaching_one_output_of_a_node() -> None:
    """What locate keeps of a step's backward: the gradient reaching the model's output,
    whichever output of its node it is (a split's second part), or a leaf's own; the
    program's gradients are as without it."""
    from gradoc.collect.probes.locating import _Forward

    x = torch.arange(6.0, requires_grad=True)
    first, second = (x * 1.0).split(3)
    held = _Forward(nn.Identity(), (), {}, {})
    held.out_at = entry.gradients_into(second, held.out_grad)
    assert held.out_at == 1
    (first.sum() + (second * torch.tensor([2.0, 3.0, 4.0])).sum()).backward()
    assert torch.equal(held.output_gradient(), torch.tensor([2.0, 3.0, 4.0]))
    assert torch.equal(x.grad, torch.tensor([1.0, 1.0, 1.0, 2.0, 3.0, 4.0]))

    leaf = torch.ones(2, requires_grad=True)
    kept = _Forward(nn.Identity(), (), {}, {})
    kept.out_at = entry.gradients_into(leaf, kept.out_grad)
    assert kept.out_at is None
    (leaf * 5.0).sum().backward()
    assert torch.equal(kept.output_gradient(), torch.full((2,), 5.0))
    assert _Forward(nn.Identity(), (), {}, {}).output_gradient() is None
