"""Differential runs: each program plain and under ``gradoc run``, its stdout, files and exit
code compared byte for byte.

    python benchmarks/differential.py                    # the zoo (tests/zoo), every program
    python benchmarks/differential.py --real             # ../shared/real-programs*, every case
    python benchmarks/differential.py --real crf_healthy gan_healthy   # some cases
    python benchmarks/differential.py shadow_modules.py  # some zoo programs

Both runs of a program happen one after the other in the same folder (a fresh copy each
time: a path it prints, a traceback, are the same), with the same seeds: ``gradoc run``
seeds every generator a script may draw from before it starts (a replay repeats the run), so
the plain run is started the same way (``seed_everything``, then the script as ``__main__``
with its ``sys.argv``). A case of ``../shared/real-programs*`` is its ``run.sh``: the program
folder and overlay it copies, the variables it exports, the script and arguments it hands to
``gradoc run`` (its own ``--check`` flags kept). A line of stdout or a file that differs
between two plain runs (a time per step, a log with a date) is the program's own noise: when
the first comparison differs, the plain run is made again and only what both plain runs
agree on is compared. A case whose ``run.sh`` stops the program by time (``timeout -s INT``)
is left out: where it stops is not the program's to repeat.

Prints one line a program (``same`` or what differed) and the tally; exits 1 when any
differed. The zoo's comparison runs in the test suite too (``tests/test_zoo.py``, with
``gradoc.watch`` as a third way).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ZOO = ROOT / "tests" / "zoo"
SHARED = Path(os.environ.get("GRADOC_SHARED") or ROOT.parent / "shared")
"""Where ``real-programs*`` lie: ``$GRADOC_SHARED``, else ``../shared`` beside the checkout."""
SUITES = ("real-programs", "real-programs-2", "real-programs-3")
LAUNCH = (
    "import os, sys, types\n"
    "from gradoc.runtime.replay import seed_everything\n"
    "sys.argv = sys.argv[1:]\n"
    "path = os.path.abspath(sys.argv[0])\n"
    "sys.path[0] = os.path.dirname(os.path.realpath(path))\n"
    "seed_everything()\n"
    "main = types.ModuleType('__main__')\n"
    "main.__file__, main.__builtins__ = path, __builtins__\n"
    "sys.modules['__main__'] = main\n"
    "with open(path, 'rb') as f:\n"
    "    exec(compile(f.read(), path, 'exec'), vars(main))\n"
)
"""The plain run, started as ``gradoc run`` starts a script: seeded, then run as ``python
SCRIPT`` runs it (a fresh ``__main__``, ``__file__`` absolute, ``sys.argv[0]`` as given;
runpy would make ``sys.argv[0]`` absolute and keep a relative ``__file__``)."""
VALUED = {"--check", "--replay-budget", "--out", "--json", "--sample-every", "--grads-every"}
"""``gradoc run`` flags that take a value."""


@dataclass
class Case:
    name: str
    source: Path
    """The folder copied to run in (the program, with its overlay on top)."""
    overlay: Path | None
    script: str
    args: list[str]
    gradoc: list[str] = field(default_factory=list)
    """The case's own ``gradoc run`` flags (``--check padding``)."""
    env: dict[str, str] = field(default_factory=dict)
    setup: list[list[str]] = field(default_factory=list)
    """Commands its ``run.sh`` runs with python first (writing its data), before both runs."""
    needs: str | None = None
    """The imports its ``run.sh`` checks first: without them, the case is skipped."""
    inside: str = ""
    """The folder of the copy it runs in (``cd "$W"/char-rnn-classification``)."""


@dataclass
class Outcome:
    code: int
    stdout: bytes
    files: dict[str, str]
    seconds: float


def zoo_cases(names: list[str]) -> list[Case]:
    programs = sorted(p.name for p in ZOO.glob("*.py") if not p.name.startswith("_"))
    chosen = [n for n in programs if not names or n in names or n.removesuffix(".py") in names]
    return [Case(n, ZOO, None, n, []) for n in chosen]


def real_cases(names: list[str]) -> list[Case]:
    cases = []
    for suite in SUITES:
        for run_sh in sorted((SHARED / suite).glob("*/run.sh")):
            name = run_sh.parent.name
            if names and name not in names:
                continue
            case = _parse(run_sh)
            if case is not None:
                cases.append(case)
    return cases


def _parse(run_sh: Path) -> Case | None:
    """The case a ``run.sh`` runs (None: one stopped by time, or one this cannot read)."""
    text = run_sh.read_text()
    source = re.search(r'cp -r "\$HERE/\.\./_src/([^/"]+)/\."', text)
    line = next((ln for ln in text.splitlines() if '"$GRADOC" run' in ln), None)
    if source is None or line is None or "-s INT" in line:
        return None
    words = shlex.split(line.split(">")[0].split('"$GRADOC" run', 1)[1].replace("$OUT", "OUT"))
    flags: list[str] = []
    while words and words[0].startswith("--"):
        flag = words.pop(0)
        given = [words.pop(0)] if flag in VALUED else []
        if flag not in ("--out", "--json"):  # the case's own flags; the places are this run's
            flags += [flag, *given]
    env = {}
    for k, v in re.findall(r"^export (\w+)=(\S+)$", text, re.M):
        if not v.startswith("$"):
            env[k] = v
    setup = [
        shlex.split(ln)[1:] for ln in text.splitlines() if ln.startswith('"$PY" ') and ">" not in ln
    ]
    needs = re.search(r'^"\$PY" -c "(import [^"]+)"', text, re.M)
    inside = re.search(r'^cd "\$W"/?(\S*)$', text, re.M)
    overlay = run_sh.parent / "overlay"
    folder = run_sh.parents[1] / "_src" / source.group(1)
    return Case(
        run_sh.parent.name,
        folder,
        overlay if overlay.is_dir() else None,
        words[0],
        words[1:],
        flags,
        env,
        setup,
        needs.group(1) if needs else None,
        inside.group(1) if inside else "",
    )


def _files(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def run(case: Case, work: Path, gradoc: bool, timeout: float) -> Outcome:
    """One run of ``case`` in a fresh copy at ``work``: plain, or under ``gradoc run``."""
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(case.source, work, ignore=shutil.ignore_patterns("__pycache__"))
    if case.overlay is not None:
        shutil.copytree(case.overlay, work, dirs_exist_ok=True)
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "MPLBACKEND": "Agg",
        **case.env,
    }
    env.pop("ZOO_WATCH", None)
    here = work / case.inside
    for command in case.setup:
        subprocess.run([sys.executable, *command], cwd=here, env=env, capture_output=True)
    before = _files(work)
    if gradoc:
        out = work.parent / f"{work.name}-run"
        shutil.rmtree(out, ignore_errors=True)
        command = [
            sys.executable, "-m", "gradoc", "run", *case.gradoc, "--out", str(out),
            case.script, *case.args,
        ]  # fmt: skip
    else:
        command = [sys.executable, "-c", LAUNCH, case.script, *case.args]
    began = time.monotonic()
    try:
        done = subprocess.run(command, cwd=here, env=env, capture_output=True, timeout=timeout)
        code, stdout = done.returncode, done.stdout
    except subprocess.TimeoutExpired as exc:
        code, stdout = -9, exc.stdout or b""
    left = {k: v for k, v in _files(work).items() if before.get(k) != v}
    return Outcome(code, stdout, left, time.monotonic() - began)


def compare(case: Case, work: Path, timeout: float) -> tuple[list[str], Outcome, Outcome]:
    """``case`` run plain and under ``gradoc run`` at ``work``: what differed (the program's
    own noise left out: when the first comparison differs, a second plain run tells), the
    plain run and the watched one."""
    plain = run(case, work, False, timeout)
    watched = run(case, work, True, timeout)
    said = differences(plain, watched)
    if said:  # the program's own noise, or gradoc's doing: a second plain run tells
        said = differences(plain, watched, run(case, work, False, timeout))
    return said, plain, watched


def differences(plain: Outcome, watched: Outcome, again: Outcome | None = None) -> list[str]:
    """What differs between the plain run and the watched one; with ``again`` (a second
    plain run), only what the two plain runs agree on is compared."""
    said = []
    if watched.code != plain.code:
        said.append(f"exit {watched.code} (plain {plain.code})")
    a, g = plain.stdout.splitlines(), watched.stdout.splitlines()
    b = again.stdout.splitlines() if again is not None else a
    if len(a) != len(g) and len(a) == len(b):
        said.append(f"stdout: {len(g)} lines (plain {len(a)})")
    else:
        noisy = _noisy(a, b)
        for i, (x, y) in enumerate(zip(a, g)):
            if _masked(x, noisy) != _masked(y, noisy) and (i >= len(b) or b[i] == x):
                said.append(f"stdout line {i + 1}: {y[:80]!r} (plain {x[:80]!r})")
                break
    kept = again.files if again is not None else plain.files
    # a name the two plain runs gave differently (a TensorBoard file's time and pid) is the
    # program's own: such files are compared by their names' shape, digits left out
    named = set(plain.files) ^ set(kept)
    shapes = {_shape(p) for p in named}
    for path in sorted(set(plain.files) | set(watched.files)):
        if _shape(path) in shapes:
            continue
        if plain.files.get(path) != watched.files.get(path) and plain.files.get(path) == kept.get(
            path
        ):
            what = "missing" if path not in watched.files else "differs"
            what = "new" if path not in plain.files else what
            said.append(f"file {path}: {what}")
    mine = sorted(_shape(p) for p in watched.files if _shape(p) in shapes)
    if mine != sorted(_shape(p) for p in plain.files if _shape(p) in shapes):
        said.append(f"files named like {sorted(shapes)[:3]}: not the plain run's")
    return said


def _shape(path: str) -> str:
    return re.sub(r"\d+", "#", path)


def _noisy(a: list[bytes], b: list[bytes]) -> dict[bytes, set[int]]:
    """The words that two plain runs printed differently, by the shape of their line (digits
    left out) and the word's place in it: ``step 80 | loss 2.5381 | step time 7.45ms`` has
    a time that differs between runs, and a loss that does not. A time that two runs happened
    to print alike on one line is still the program's noise on that line."""
    noisy: dict[bytes, set[int]] = {}
    for x, y in zip(a, b):
        if x != y and _line_shape(x) == _line_shape(y):
            words = zip(x.split(), y.split())
            noisy.setdefault(_line_shape(x), set()).update(
                i for i, (u, v) in enumerate(words) if u != v
            )
    return noisy


DURATION = re.compile(rb"^\(?\d+(\.\d+)?(ms|s|m|h|sec|secs|min|mins)\)?[,;:]?$")
"""A word that is a time the program measured (``7.45ms``, ``(0m 2s)``): its clock, which a
watched run may read differently, not what it computed."""


def _masked(line: bytes, noisy: dict[bytes, set[int]]) -> list[bytes]:
    """``line``'s words, those at a noisy place for its shape and durations left out."""
    places = noisy.get(_line_shape(line), set())
    words = enumerate(line.split())
    return [w for i, w in words if i not in places and not DURATION.match(w)]


def _line_shape(line: bytes) -> bytes:
    return re.sub(rb"\d+", b"#", line)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="zoo programs or real-program cases (default: all)")
    ap.add_argument("--real", action="store_true", help="the cases of ../shared/real-programs*")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds a run may take")
    ns = ap.parse_args(argv)
    cases = real_cases(ns.names) if ns.real else zoo_cases(ns.names)
    if not cases:
        print("no case found", file=sys.stderr)
        return 2
    failed = skipped = 0
    with tempfile.TemporaryDirectory(prefix="gradoc-differential-") as tmp:
        for case in cases:
            if case.needs and subprocess.run([sys.executable, "-c", case.needs]).returncode:
                print(f"{case.name:48s} skipped: {case.needs} failed", flush=True)
                skipped += 1
                continue
            said, plain, watched = compare(case, Path(tmp) / "work", ns.timeout)
            failed += bool(said)
            ratio = watched.seconds / plain.seconds if plain.seconds else float("nan")
            verdict = "same" if not said else "DIFFERS: " + "; ".join(said)
            print(f"{case.name:48s} exit {plain.code:3d}  {ratio:4.2f}x  {verdict}", flush=True)
    ran = len(cases) - skipped
    print(f"differential: {ran - failed} of {ran} the same, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
