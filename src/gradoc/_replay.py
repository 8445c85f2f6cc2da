"""Re-execute a script up to a failing step with tracing armed there (``gradoc run``).

Used when a script stopped at its first NaN before gradoc could see where it came from
(a loss written in the training loop, checked with ``if torch.isnan(loss): sys.exit()``).
``gradoc run`` seeds every RNG before the script runs; the replay seeds them the same
way, so steps 0..k-1 repeat exactly, then traces step k whole.

    python -m gradoc._replay --step K --result OUT.json SCRIPT [ARGS...]
"""

from __future__ import annotations

import argparse
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
