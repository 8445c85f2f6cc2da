"""gradoc's public API, in one module: what ``import gradoc`` gives.

- watching a loop: :func:`watch` (a :class:`Run`), configured by :class:`WatchConfig`
  and :class:`GuardConfig`; :func:`every`, :func:`log_spaced`, :func:`never`, :func:`lean` say when;
- reading a run log: :func:`open_run` (a :class:`RunLog` of :class:`Series`);
- in Jupyter, a :class:`Run` shows a live status while it trains, and a closed run or a
  :class:`RunLog` shows its report inline;
- locating: :func:`check_numerics` (raises :class:`NumericsError`);
- tools: :func:`audit_padding`, :func:`plan_checkpointing`, :func:`apply_checkpointing`;
- errors: :class:`GradocError` (every error gradoc raises for a usage problem) and
  :class:`GuardGaveUp` (a guarded run that could not go on).

Everything else is gradoc's own and may change.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch.nn as nn
from torch.optim import Optimizer

from ._version import __version__
from .collect import Run
from .collect import watch as _watch
from .config import GuardConfig, WatchConfig
from .errors import GradocError
from .guard import GuardGaveUp
from .locate.numerics import NumericsError, check_numerics
from .locate.padding import audit_padding
from .report import notebook as _notebook  # noqa: F401  (runs show their report in Jupyter)
from .runtime.finish import write_outputs
from .schedule import budget, every, lean, log_spaced, never
from .store import RunLog, Series, open_run
from .tools import apply_checkpointing, plan_checkpointing

__all__ = [
    "GradocError",
    "GuardConfig",
    "GuardGaveUp",
    "NumericsError",
    "Run",
    "RunLog",
    "Series",
    "WatchConfig",
    "__version__",
    "apply_checkpointing",
    "audit_padding",
    "budget",
    "check_numerics",
    "every",
    "lean",
    "log_spaced",
    "never",
    "open_run",
    "plan_checkpointing",
    "watch",
]


def watch(
    model: nn.Module | list[nn.Module],
    optimizer: Optimizer | None = None,
    out: str | Path | None = None,
    *,
    config: WatchConfig | None = None,
    resume: bool = False,
    **options: Any,
) -> Run:
    """Watch a training loop: one line, no other change to the loop.

    The loss is captured at ``backward()``, steps are counted at ``optimizer.step()``;
    without an optimizer (a loop that updates the weights itself) a step is one
    ``backward()`` or ``torch.autograd.grad`` call.
    ``out`` is the run directory (default ``gradoc-runs/<script>-<time>``); ``options``
    are :class:`WatchConfig` fields (``grads=``, ``params=``, ``activations=``, ...);
    By default gradoc only observes: nothing is skipped, clipped or rolled back.
    ``guard=True`` (or a :class:`GuardConfig`) keeps the run alive: skips non-finite
    steps, clips outlier gradient norms, rolls back (see :mod:`gradoc.guard`);
    ``skip_nonfinite_updates=True`` only skips non-finite steps. Under
    torchrun, rank r > 0 writes ``out/rank<r>`` (unless ``out`` names its rank already).
    ``out`` is made absolute now, so the script may change directory.
    ``resume=True``: a job restarted from its checkpoint continues the run log in ``out``
    as a new segment (its steps go on from the optimizer's state step, or from the last
    logged step); without a log there, a new run starts.

    >>> import torch, gradoc
    >>> model = torch.nn.Linear(4, 2)
    >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> with gradoc.watch(model, opt, out=tmp_path / "run") as run:
    ...     for _ in range(3):
    ...         loss = model(torch.randn(8, 4)).pow(2).mean()
    ...         opt.zero_grad(); loss.backward(); opt.step()
    >>> gradoc.open_run(run.dir).scalar("loss").steps
    [0, 1, 2]
    """
    return _watch(
        model, optimizer, out, config=config, finish=write_outputs, resume=resume, **options
    )
