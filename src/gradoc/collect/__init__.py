"""collect: the only code that touches live modules and optimizers."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import torch.nn as nn
from torch.optim import Optimizer

from ..config import WatchConfig
from ..errors import UsageError
from .run import Run

__all__ = ["Run", "prepare_run_dir", "watch"]


def prepare_run_dir(out: str | Path | None, name: str = "run") -> Path:
    """Create the run directory; refuse a file, or a directory that already holds a run."""
    if out is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = Path("gradoc-runs") / f"{name}-{stamp}"
        path, i = base, 1
        while path.exists():
            path, i = base.with_name(f"{base.name}-{i}"), i + 1
    else:
        path = Path(out)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out {path} exists and is not a directory")
    if (path / "run.db").exists():
        raise UsageError(
            f"{path} already holds a run log (run.db); choose another --out or remove it"
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create run directory {path}: {exc.strerror or exc}") from None
    return path


def watch(
    model: nn.Module | list[nn.Module],
    optimizer: Optimizer,
    out: str | Path | None = None,
    *,
    config: WatchConfig | None = None,
    **options: Any,
) -> Run:
    """Watch a training loop: one line, no other change to the loop.

    The loss is captured at ``backward()``, steps are counted at ``optimizer.step()``.
    ``out`` is the run directory (default ``gradoc-runs/<script>-<time>``); ``options``
    are :class:`WatchConfig` fields (``grads=``, ``params=``, ``activations=``, ...);
    ``guard=True`` (or a :class:`GuardConfig`) keeps the run alive: skips non-finite
    steps, clips outlier gradient norms, rolls back (see :mod:`gradoc.guard`).

    >>> import torch, gradoc
    >>> model = torch.nn.Linear(4, 2)
    >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> with gradoc.watch(model, opt, out=tmp_path / "run") as run:   # doctest: +SKIP
    ...     for _ in range(3):
    ...         loss = model(torch.randn(8, 4)).pow(2).mean()
    ...         opt.zero_grad(); loss.backward(); opt.step()
    >>> gradoc.open_run(run.dir).scalar("loss").steps                  # doctest: +SKIP
    [0, 1, 2]
    """
    if config is not None and options:
        raise TypeError("pass either config= or WatchConfig fields as keywords, not both")
    cfg = config or WatchConfig(**options)
    stem = Path(sys.argv[0]).stem if sys.argv and sys.argv[0] else ""
    name = stem if stem and not stem.startswith("-") else "run"  # `python -c` gives '-c'
    run = Run(prepare_run_dir(out, name), cfg)
    run.attach(model, optimizer)
    return run
