"""collect: the only code that touches live modules and optimizers."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import torch.nn as nn
from torch.optim import Optimizer

from .._util import entry, objects
from .._util.paths import output_dir
from .._util.text import one_line
from ..config import WatchConfig
from ..errors import GradocError, UsageError
from .run import Finish, Run

__all__ = ["Run", "prepare_run_dir", "torchrun_out", "torchrun_rank", "watch"]


def prepare_run_dir(
    out: str | Path | None,
    name: str = "run",
    *,
    rank: int = 0,
    flag: str = "--out",
    resume: bool = False,
) -> Path:
    """Create the run directory and return it absolute (a script that changes directory
    keeps its run); refuse a file, a directory that already holds a run, or a place that
    cannot be written. ``rank`` r > 0 (torchrun) gets ``OUT/rank<r>``. ``resume``: a
    directory that holds a run is the run to continue (one that does not, a run to start).
    Messages name the options as the caller's ``flag`` does (``--out``: the command line)."""
    again = "--resume" if flag.startswith("--") else "resume=True"
    if resume and out is None:
        raise UsageError(f"{again} continues the run in a directory: give it with {flag}")
    if out is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = Path("gradoc-runs") / f"{name}-{stamp}"
        path, i = base, 1
        while path.exists():
            path, i = base.with_name(f"{base.name}-{i}"), i + 1
        base = path
    else:
        base = Path(out)
    if base.exists() and not base.is_dir():
        raise UsageError(f"{flag} {one_line(base)} exists and is not a directory")
    path = base / f"rank{rank}" if rank else base
    if (path / "run.db").exists() and not resume:
        raise UsageError(
            f"{one_line(path)} already holds a run log (run.db); choose another {flag}, remove "
            f"it, or continue it with {again} (a training restarted from its checkpoint)"
        )
    return output_dir(path, flag)


def torchrun_out(name: str) -> Path:
    """The run directory every rank of one torchrun job agrees on, when none is given."""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID") or os.environ.get("MASTER_PORT", "ddp")
    return Path("gradoc-runs") / f"{name}-{run_id}"


def torchrun_rank() -> tuple[int, int]:
    """(rank, world size) under torchrun (its environment variables), else (0, 1)."""
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 0, 1


def watch(
    model: nn.Module | list[nn.Module],
    optimizer: Optimizer | None = None,
    out: str | Path | None = None,
    *,
    config: WatchConfig | None = None,
    finish: Finish | None = None,
    resume: bool = False,
    **options: Any,
) -> Run:
    """The live side of :func:`gradoc.watch` (which documents it); ``finish`` writes what
    the run leaves at close (the report, the sinks; see ``Run``)."""
    if config is not None and options:
        raise TypeError("pass either config= or WatchConfig fields as keywords, not both")
    models = model if isinstance(model, list) else [model]
    if not all(isinstance(m, nn.Module) for m in models):
        raise TypeError(f"gradoc.watch takes a torch.nn.Module (or a list), not {model!r:.80}")
    if optimizer is not None and not isinstance(optimizer, Optimizer):
        raise TypeError(f"gradoc.watch takes a torch.optim.Optimizer, not {optimizer!r:.80}")
    cfg = config or WatchConfig(**options)
    stem = Path(sys.argv[0]).stem if sys.argv and sys.argv[0] else ""
    name = stem if stem and not stem.startswith("-") else "run"  # `python -c` gives '-c'
    rank, world = torchrun_rank()
    if world == 1:
        path = prepare_run_dir(out, name, flag="out=", resume=resume)
        run = Run(path, cfg, finish=finish, resume=resume)
    else:
        where = torchrun_out(name) if out is None else Path(out)
        run = _rank_run(where, name, rank, cfg, finish, resume)
    try:
        run.attach(model, objects.stepped(optimizer) if optimizer is not None else None)
    except GradocError:
        raise
    except Exception as exc:  # gradoc's failure, not the program's: it trains unwatched
        entry.failed(exc, "collect.watch")
    return run


def _rank_run(
    out: Path, name: str, rank: int, cfg: WatchConfig, finish: Finish | None, resume: bool
) -> Run:
    """Under torchrun, ranks must never share a log, nor kill the job over one: rank r > 0
    writes ``out/rank<r>`` unless ``out`` already names its rank (``runs/rank1``,
    ``runs/r1``); a rank that finds ``out`` taken by another writes ``out/rank<r>``."""
    own = rank == 0 or re.search(rf"(?<![0-9]){rank}(?![0-9])", out.name) is not None
    if not own:
        path = prepare_run_dir(out, name, rank=rank, flag="out=", resume=resume)
        return Run(path, cfg, finish=finish, resume=resume)
    try:
        path = prepare_run_dir(out, name, flag="out=", resume=resume)
        return Run(path, cfg, finish=finish, resume=resume)
    except UsageError:
        if not (out / "run.db").exists():
            raise  # not a collision: a real problem with out
        path = prepare_run_dir(out / f"rank{rank}", name, flag="out=", resume=resume)
        return Run(path, cfg, finish=finish, resume=resume)
