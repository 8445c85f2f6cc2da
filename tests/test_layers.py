"""The package's import direction, written down once: a module imports only lower layers.

The pipeline reads collect -> stats -> store -> detect -> locate -> findings -> diagnose ->
analysis -> report; the import layers below follow it, with the live side (``collect``) above the
engines it drives (statistics, the store, locating, the guard) and below everything that
reads a finished run (the finding kinds, the diagnosis, report, sinks). ``tools`` are
applications (they run scripts, render); what the live side needs of them (the padding
audit) lives in ``locate``.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import gradoc

LAYERS: list[set[str]] = [
    {"_version", "errors"},
    {"_util"},  # small shared helpers: text, pytrees, wrappers, patches, RNG state, paths
    {"schedule", "data"},
    {"config"},
    {"stats"},  # pure tensor statistics
    {"store"},  # the run log
    {"detect"},  # rules over a run log
    {"locate", "guard"},  # engines the live side drives: replays, guard actions
    {"collect", "testing"},  # the live run; the numerics harness
    {"findings"},  # one class per finding kind: its rule and its explanation
    {"diagnose"},  # the causal stories, the ranking
    {"analysis"},  # a run log in, the typed report out
    {"compare", "fix"},
    {"report"},  # the only renderer (rich, HTML, charts)
    {"sinks"},
    {"runtime"},  # gradoc run's runtime: running scripts, side effects, replays, ranks
    {"tools"},  # applications
    {"api"},  # the public API, in one module
    {"__init__"},
    {"integrations", "demo"},  # programs of the API
    {"cli"},
    {"__main__"},
]
ROOT = Path(gradoc.__file__).parent


def unit(path: Path) -> str:
    """A subpackage, or a top-level module of the package."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return parts[0]


def imports(path: Path) -> set[str]:
    """The package's units this file imports (module level or inside functions)."""
    here = path.relative_to(ROOT).parent.parts
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = list(here[: len(here) - node.level + 1])
            target = base + (node.module.split(".") if node.module else [])
            if target:
                found.add(target[0])
            else:  # from . import x / from .. import x: the names are the units
                found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            if parts[0] == "gradoc":
                found.add(parts[1] if len(parts) > 1 else "__init__")
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == "gradoc":
                    found.add(parts[1] if len(parts) > 1 else "__init__")
    return found


def test_every_module_imports_only_lower_layers() -> None:
    level = {u: i for i, layer in enumerate(LAYERS) for u in layer}
    backward, unplaced = [], set()
    for path in sorted(ROOT.rglob("*.py")):
        me = unit(path)
        if me not in level:
            unplaced.add(me)
            continue
        for other in imports(path) - {me}:
            if other not in level:
                unplaced.add(other)
            elif level[other] >= level[me]:
                backward.append(f"{path.relative_to(ROOT)} imports {other}")
    assert not unplaced, f"place these in LAYERS: {sorted(unplaced)}"
    assert not backward, "imports against the layering:\n" + "\n".join(backward)


def test_the_walk_reads_every_kind_of_import() -> None:
    """The check itself: a relative import two levels up is read as the unit it names."""
    assert {"stats", "store"} <= imports(ROOT / "collect" / "probes" / "activations.py")
    assert {"detect", "locate"} <= imports(ROOT / "collect" / "probes" / "locate.py")
    assert "report" not in imports(ROOT / "collect" / "run.py")
    assert "demo" not in imports(ROOT / "cli.py") or "cli" not in imports(
        ROOT / "demo" / "gallery.py"
    )


def module_name(path: Path) -> str:
    parts = ("gradoc", *path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_imports(path: Path, modules: set[str]) -> set[str]:
    """The package's modules this file imports: anywhere in it, ``TYPE_CHECKING`` blocks
    and function bodies included (an import deferred into a function is still a circle)."""
    me = module_name(path)
    package = me.split(".") if path.name == "__init__.py" else me.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + (node.module.split(".") if node.module else []))
            for alias in node.names:
                if f"{target}.{alias.name}" in modules:
                    found.add(f"{target}.{alias.name}")
                elif target in modules:
                    found.add(given_by(target, alias.name, modules))
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in modules}
    return found - {me}


def given_by(package: str, name: str, modules: set[str]) -> str:
    """The module a package's ``__init__`` takes ``name`` from (a room of ``collect`` gives
    its modules' names: importing the name depends on that module, not on the whole room),
    or the package itself."""
    init = ROOT.joinpath(*package.split(".")[1:], "__init__.py")
    if not init.is_file():
        return package
    for node in ast.parse(init.read_text()).body:
        if (
            isinstance(node, ast.ImportFrom)
            and node.level == 1
            and node.module
            and name in {a.asname or a.name for a in node.names}
        ):
            source = f"{package}.{node.module}"
            return source if source in modules else package
    return package


def test_no_import_circle_between_modules() -> None:
    """No module imports, directly or through others, a module that imports it: inside a
    package as between packages (the probes see their run through ``collect.context``)."""
    files = sorted(ROOT.rglob("*.py"))
    modules = {module_name(p) for p in files}
    graph = {module_name(p): module_imports(p, modules) for p in files}
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        raise AssertionError(f"import circle: {' -> '.join(exc.args[1])}") from None


def test_the_circle_check_sees_deferred_and_type_only_imports() -> None:
    modules = {module_name(p) for p in ROOT.rglob("*.py")}
    # a function-level import and a TYPE_CHECKING one
    assert "gradoc.runtime.replay" in module_imports(ROOT / "tools" / "amp_compare.py", modules)
    assert "gradoc.collect.context" in module_imports(
        ROOT / "collect" / "step" / "protocol.py", modules
    )
    assert "gradoc.api" in module_imports(ROOT / "__init__.py", modules)


def test_the_configuration_chooses_the_probes_once(tmp_path: Path) -> None:
    """The run and its step protocol never ask the configuration what to watch: the probes
    are chosen once (``probes_for``), and each watches what it was made for."""
    from gradoc.collect.probes.activations import AmpRanges
    from gradoc.collect.probes.lengths import Lengths
    from gradoc.collect.probes.locate import Locate
    from gradoc.collect.probes.padding import PaddingAudit
    from gradoc.collect.probes.setup import SetupCheck
    from gradoc.collect.run import Run
    from gradoc.collect.step.cadence import Cadence
    from gradoc.config import WatchConfig

    chosen = {}
    for name, config in {
        "plain": WatchConfig(locate=False),
        "all": WatchConfig(check_amp=True, check_padding=True),
    }.items():
        (tmp_path / name).mkdir()
        run = Run(tmp_path / name, config)
        chosen[name] = [type(p) for p in run.steps.probes]
        run.close()
    plain = [Lengths, SetupCheck, Cadence]  # the sampled statistics' budget: the default
    assert chosen == {"plain": plain, "all": [*plain, AmpRanges, PaddingAudit, Locate]}
    for file in ("run.py", "step/protocol.py"):
        tree = ast.parse((ROOT / "collect" / file).read_text())
        asked = [
            node.attr
            for fn in ast.walk(tree)
            if isinstance(fn, ast.FunctionDef) and fn.name != "probes_for"
            for node in ast.walk(fn)
            if isinstance(node, ast.Attribute)
            and node.attr.startswith(("check_", "locate"))
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "config"
        ]
        assert not asked, f"collect/{file} asks config.{asked}: choose a probe in probes_for"
    assert len((ROOT / "collect" / "run.py").read_text().splitlines()) < 250


ROOMS = ROOT / "collect"
"""``collect/``'s rooms: a subfolder each (attach, probes, step, graph), the run's life at the
top."""


def rooms() -> list[Path]:
    return sorted(p for p in ROOMS.iterdir() if (p / "__init__.py").is_file())


def into_rooms(path: Path, source: str | None = None) -> list[str]:
    """What ``path`` imports of a collect/ room it is not in that the room does not give:
    a room is imported as a whole (the names its ``__init__`` lists in ``__all__``), never
    one of its modules."""
    me = module_name(path)
    package = me.split(".") if path.name == "__init__.py" else me.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text() if source is None else source)):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = package[: len(package) - node.level + 1] if node.level else []
        target = base + (node.module.split(".") if node.module else [])
        if target[:2] != ["gradoc", "collect"] or len(target) < 3:
            continue
        room = ROOMS / target[2]
        if not (room / "__init__.py").is_file() or me.startswith(".".join(target[:3])):
            continue
        if len(target) > 3:
            found.append(".".join(target))
            continue
        given = given_names(room)
        found += [f"{'.'.join(target)}.{a.name}" for a in node.names if a.name not in given]
    return found


def given_names(room: Path) -> set[str]:
    """The names a room's ``__init__`` lists in ``__all__``."""
    for node in ast.parse((room / "__init__.py").read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return set(ast.literal_eval(node.value))
    return set()


def test_collect_is_rooms_a_newcomer_reads() -> None:
    """collect/ is a handful of rooms (none of more than 15 modules), each saying in its
    docstring what it is and what it may import; a module outside a room imports the room
    (what its ``__init__`` gives), never one of its modules."""
    assert {p.name for p in rooms()} == {"attach", "probes", "step", "graph"}
    for room in rooms():
        assert len(list(room.glob("*.py"))) <= 15, room
        doc = ast.get_docstring(ast.parse((room / "__init__.py").read_text())) or ""
        assert "imports" in doc and len(doc.split()) >= 30, f"{room.name}: say what it is"
    assert len(list(ROOMS.glob("*.py"))) <= 15
    files = sorted(ROOT.rglob("*.py"))
    inside = {str(p.relative_to(ROOT)): found for p in files if (found := into_rooms(p))}
    assert not inside, f"import the room, not its modules: {inside}"


def test_the_rooms_check_sees_a_module_of_another_room() -> None:
    source = "from ..attach.taps import handed\nfrom ..attach import taps, _hooks\n"
    source += "from .packet import Packet\nfrom .. import probe\n"
    found = into_rooms(ROOMS / "step" / "a_module.py", source)
    assert found == ["gradoc.collect.attach.taps", "gradoc.collect.attach._hooks"]


ROOM_ORDER = ("graph", "attach", "probes", "step")
"""collect's rooms from the bottom up: a room runs on the rooms below it (its imports of a
room above it are for types only, under ``TYPE_CHECKING``), the run's life at the top runs
on them all."""


def runtime_rooms(path: Path) -> set[str]:
    """The collect rooms ``path`` imports when it runs: every import but those under
    ``if TYPE_CHECKING:``."""
    me = module_name(path)
    package = me.split(".") if path.name == "__init__.py" else me.split(".")[:-1]
    tree = ast.parse(path.read_text())
    typing_only = {
        id(n)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
        for n in ast.walk(block)
    }
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and id(node) not in typing_only:
            base = package[: len(package) - node.level + 1] if node.level else []
            target = base + (node.module.split(".") if node.module else [])
            if target[:2] == ["gradoc", "collect"] and len(target) > 2:
                found.add(target[2])
    return found & set(ROOM_ORDER)


def test_a_room_runs_on_the_rooms_below_it() -> None:
    assert set(ROOM_ORDER) == {p.name for p in rooms()}
    against = [
        f"{path.relative_to(ROOT)} imports collect/{other}"
        for room in ROOM_ORDER
        for path in sorted((ROOMS / room).glob("*.py"))
        for other in runtime_rooms(path)
        if ROOM_ORDER.index(other) > ROOM_ORDER.index(room)
    ]
    assert not against, "a room imports a room above it when it runs:\n" + "\n".join(against)
    # the check itself: a type-only import of a room above is not one it runs on
    assert "probes" not in runtime_rooms(ROOMS / "attach" / "manual.py")
    assert "graph" in runtime_rooms(ROOMS / "attach" / "manual.py")
