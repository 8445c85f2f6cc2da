"""Re-execute a script up to a failing step with tracing armed there (``gradoc run``).

Used when a script stopped at its first NaN before gradoc could see where it came from
(a loss written in the training loop, checked with ``if torch.isnan(loss): sys.exit()``).
``gradoc run`` seeds every RNG before the script runs; the replay seeds them the same
way, so steps 0..k-1 repeat exactly, then traces step k whole.

    python -m gradoc._replay --step K --result OUT.json SCRIPT [ARGS...]

When: only for a non-finite value gradoc saw and could not locate (:func:`unlocated_step`),
never for an ordinary error; by itself only when the first run touched nothing outside
the run directory (see ``gradoc._effects``), else on request (``gradoc replay RUN_DIR``,
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
from typing import Any

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


def unlocated_step(
    events: list[Any], meta: dict[str, Any], exit_code: int | None, clues: list[str]
) -> int | None:
    """The step to replay: the first non-finite step of a run whose origin was not found,
    or the step a script stopped in with a NaN/Inf in hand (``clues``); None otherwise."""
    origins = [e.data.get("origin") or {} for e in events if e.kind == "nonfinite_origin"]
    if any(o.get("file") or o.get("phase") in ("input", "optimizer") for o in origins):
        return None  # located already (bad inputs and bad weights have no line to find)
    bad = [e.step for e in events if e.kind in ("nonfinite_loss", "nonfinite_grad")]
    bad = [s for s in bad if isinstance(s, int)]
    if bad:
        return int(min(bad))
    if meta.get("ended_mid_step") and exit_code and clues:
        return int(meta.get("steps") or 0)  # stopped inside this step, at a NaN
    return None


def replay(
    out: Path, script: Path, args: list[str], cwd: str, step: int, budget: float
) -> dict[str, Any] | None:
    """Run the script again in a fresh process up to ``step``, traced there; record the
    origin found in ``out``'s log. Returns the origin (None if none was found)."""
    import subprocess

    from .store.writer import append_event

    with tempfile.TemporaryDirectory() as tmp:
        result_path = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "gradoc._replay", "--step", str(step)]
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
    origin: dict[str, Any] | None = result.get("origin")
    if not isinstance(origin, dict):
        return None
    origin["note"] = (
        f"the script ended at step {step} before gradoc could locate it; gradoc re-ran "
        f"it with every RNG seeded and tracing armed at step {step}"
    )
    message = f"{origin['phase']}: {origin['op']} ({origin['file']}:{origin['line']}) [replayed]"
    append_event(out / "run.db", step, "nonfinite_origin", message, {"origin": origin})
    return origin


def script_digest(path: Path) -> str:
    """What identifies the script a replay must run: the SHA-256 of its source."""
    source = path / "__main__.py" if path.is_dir() else path
    return hashlib.sha256(source.read_bytes()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gradoc._replay")
    ap.add_argument("--step", type=int, required=True)
    ap.add_argument("--result", required=True)
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    ns = ap.parse_args(argv)

    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    from ._runner import check_script, exec_script
    from .collect.auto import AutoAttach
    from .collect.run import Run
    from .config import WatchConfig
    from .locate import origin_from
    from .schedule import never

    script = check_script(ns.script)
    config = WatchConfig(
        activations=never(), params=never(), locate=False, skip_nonfinite_updates=False
    )
    run = Run(Path(tempfile.mkdtemp(prefix="gradoc-replay-")), config, script=str(script))
    auto = AutoAttach(run)
    armed = run._locator._armed

    def write(found: dict[str, Any] | None) -> None:
        origin = origin_from(ns.step, found).to_json() if found is not None else None
        Path(ns.result).write_text(json.dumps({"origin": origin}, default=str))

    def arm(opt: Any, args: Any, kwargs: Any) -> None:
        if run.step == ns.step and not armed.active:
            armed.start()

    def finish(opt: Any, args: Any, kwargs: Any) -> None:
        if run.step == ns.step:  # the run's own pre-step hook has paused the trace already
            write(armed.stop() if armed.active else run._locator._armed_found)
            sys.stdout.flush()
            os._exit(0)  # the step is traced: nothing more to learn from the script

    hooks = [register_optimizer_step_post_hook(arm), register_optimizer_step_pre_hook(finish)]
    seed_everything()
    if ns.step == 0:
        armed.start()
    try:
        exec_script(script, list(ns.args))
    finally:
        found = armed.stop() if armed.active else None
        for h in hooks:
            h.remove()
        auto.remove()
        write(found)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
