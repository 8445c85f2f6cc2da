"""Re-execute a script up to a failing step with tracing armed there (``gradoc run``).

Used when a script stopped at its first NaN before gradoc could see where it came from
(a loss written in the training loop, checked with ``if torch.isnan(loss): sys.exit()``).
``gradoc run`` seeds every RNG before the script runs; the replay seeds them the same
way, so steps 0..k-1 repeat exactly, then traces step k whole.

    python -m gradoc.runtime.replay --step K --result OUT.json SCRIPT [ARGS...]

When: only for a non-finite value gradoc saw and could not locate (:func:`unlocated_step`),
never for an ordinary error; by itself only when the first run touched nothing outside
the run directory (see ``gradoc.runtime.effects``), else on request (``gradoc replay RUN_DIR``,
``gradoc run --replay``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..detect.finding import Origin
from ..store import EventKind, RunMeta

if TYPE_CHECKING:
    from ..locate import Birth

SEED = 0


def seed_everything(seed: int = SEED) -> None:
    """Seed the RNGs a script may use without seeding them itself."""
    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:  # pragma: no cover - numpy is a dependency, but be lenient
        pass


def not_replayable(meta: RunMeta, step: int) -> str | None:
    """Why a run cannot be replayed up to ``step`` (None: it can). A resumed run's script
    starts again from its checkpoint, not from step 0, so its steps do not repeat."""
    if len(meta.segments) < 2:
        return None
    start = meta.segments[-1].get("start_step")
    return (
        f"the run was resumed (at step {start}): a re-run starts the script again from its "
        f"checkpoint, so its steps would not repeat up to step {step}"
    )


def unlocated_step(
    events: list[Any], meta: RunMeta, exit_code: int | None, clues: list[str]
) -> int | None:
    """The step to replay: the first non-finite step of a run whose origin was not found,
    or the step a script stopped in with a NaN/Inf in hand (``clues``), or step 0 (every
    operation checked from the start) for a program in which gradoc saw no step while it
    printed or raised a NaN/Inf, or the step of a NaN/Inf it printed just before it ended
    (:func:`printed_at_the_end`); None otherwise."""
    origins = [e.data.get("origin") or {} for e in events if e.kind == EventKind.NONFINITE_ORIGIN]
    if any(o.get("file") or o.get("phase") in ("input", "optimizer") for o in origins):
        return None  # located already (bad inputs and bad weights have no line to find)
    bad = [e.step for e in events if e.kind in (EventKind.NONFINITE_LOSS, EventKind.NONFINITE_GRAD)]
    bad = [s for s in bad if isinstance(s, int)]
    if bad:
        return int(min(bad))
    if meta.ended_mid_step and exit_code and clues:
        return meta.steps or 0  # stopped inside this step, at a NaN
    if not meta.steps and (clues or meta.printed_nonfinite):
        return 0  # no step seen, a NaN/Inf printed or raised: check the whole program
    from ..findings.nonfinite import printed_at_the_end

    printed = printed_at_the_end(meta)
    if printed is not None:
        return printed  # the program printed a NaN/Inf gradoc did not see, and ended
    return None


def replay(
    out: Path,
    script: Path,
    args: list[str],
    cwd: str,
    step: int,
    budget: float,
    whole: bool = False,
    moved: tuple[str, str] | None = None,
) -> Origin | None:
    """Run the script again in a fresh process up to ``step``, traced there (``whole``: no
    step was seen, every operation is checked from the start); record the origin found in
    ``out``'s log. Returns the origin (None if none was found). ``moved``: (the copy, the
    folder copied) when the script runs in a working copy: the origin's file is the user's."""
    import subprocess

    from ..store.writer import append_event

    with tempfile.TemporaryDirectory() as tmp:
        result_path = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "gradoc.runtime.replay", "--step", str(step)]
        cmd += ["--result", str(result_path), str(script), *args]
        try:
            subprocess.run(
                cmd,
                cwd=cwd,
                timeout=budget,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired:
            message = f"the replay did not reach step {step} within {budget:g} s"
            append_event(out / "run.db", step, "replay_timeout", message, {})
            return None
        try:
            result = json.loads(result_path.read_text()) if result_path.exists() else {}
        except ValueError:
            result = {}
    said = result.get("origin")
    if not isinstance(said, dict):
        return None
    origin = Origin.from_json(said)
    if moved is not None and origin.file:
        copy, root = moved
        if origin.file == copy or origin.file.startswith(copy + os.sep):
            origin.file = root + origin.file[len(copy) :]
    origin.note = (
        "gradoc saw no training step, but the program printed or raised a NaN/Inf; gradoc "
        "re-ran it with every RNG seeded and every operation checked from the start"
        if whole
        else f"gradoc could not locate the NaN/Inf of step {step} in the run; it re-ran it "
        f"with every RNG seeded and tracing armed at step {step}"
    )
    message = f"{origin.phase}: {origin.op} ({origin.file}:{origin.line}) [replayed]"
    append_event(
        out / "run.db", step, EventKind.NONFINITE_ORIGIN, message, {"origin": origin.to_json()}
    )
    return origin


def script_digest(path: Path) -> str:
    """What identifies the script a replay must run: the SHA-256 of its source."""
    source = path / "__main__.py" if path.is_dir() else path
    return hashlib.sha256(source.read_bytes()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gradoc.runtime.replay")
    ap.add_argument("--step", type=int, required=True)
    ap.add_argument("--result", required=True)
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    ns = ap.parse_args(argv)

    from ..collect.auto import AutoAttach
    from ..collect.run import Run
    from ..config import WatchConfig
    from ..locate import origin_from
    from ..schedule import never
    from .runner import check_script, exec_script

    script = check_script(ns.script)
    config = WatchConfig(
        activations=never(), params=never(), locate=False, skip_nonfinite_updates=False
    )
    # the replay's own log, not kept: beside the result, in the caller's temporary folder,
    # which goes even when the replay is killed at its time budget
    scratch = Path(tempfile.mkdtemp(prefix="gradoc-replay-", dir=Path(ns.result).parent))
    run = Run(scratch, config, script=str(script))
    auto = AutoAttach(run)
    armed = run.locator.armed
    written = [False]

    def write(found: Birth | None) -> None:
        if written[0]:
            return
        written[0] = True
        origin = origin_from(ns.step, found).to_json() if found is not None else None
        Path(ns.result).write_text(json.dumps({"origin": origin}, default=str))

    def finish(found: Birth | None) -> None:
        write(found)
        sys.stdout.flush()
        os._exit(0)  # the step is traced: nothing more to learn from the script

    # the first birth inside the traced window is the answer: stop there
    armed.tracer.on_found = lambda: finish(armed.tracer.found)

    def listen(kind: str, step: int) -> None:
        # a step is traced from the end of the one before (without an optimizer, from
        # its statistics point: the next forward comes before the next backward) to its
        # own statistics point
        manual = run.counts_backward
        if step == ns.step - 1 and kind == ("stats" if manual else "end"):
            armed.start()
        elif step == ns.step and kind == "stats":
            finish(armed.stop() if armed.active else run.locator.armed_found)

    run.step_listeners.append(listen)
    seed_everything()
    if ns.step == 0:
        armed.start()
    try:
        exec_script(script, list(ns.args))
    finally:
        found = armed.stop() if armed.active else None
        auto.remove()
        write(found)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
