"""What a closed run leaves besides its log: ``report.json`` and the sinks.

``collect`` hands the finished run's directory to a callback (``Run(finish=...)``), so the
live side imports neither the report nor the sinks; :func:`gradoc.watch`, ``gradoc run``
and the integrations give it :func:`write_outputs`. :func:`watch` is ``gradoc.watch``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._text import safe
from .collect import Run
from .collect import watch as _watch
from .config import WatchConfig

if TYPE_CHECKING:
    import torch.nn as nn
    from torch.optim import Optimizer


def write_outputs(
    run_dir: Path,
    json_path: str | Path | None,
    stopped: dict[str, Any] | None,
    sinks: dict[str, str],
) -> dict[str, Any]:
    """Write the report from the finished log, then each sink; the report."""
    from .report import write_report  # the report reads the finished log

    report = write_report(run_dir, json_path, stopped=stopped)
    for kind, target in sinks.items():
        try:
            from .sinks import export

            export(kind, run_dir, target, report)
        except Exception as exc:  # a sink must not cost the run its report
            print(f"gradoc: could not write the {kind} sink: {safe(exc)}", file=sys.stderr)
    return report


def watch(
    model: nn.Module | list[nn.Module],
    optimizer: Optimizer | None = None,
    out: str | Path | None = None,
    *,
    config: WatchConfig | None = None,
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
    return _watch(model, optimizer, out, config=config, finish=write_outputs, **options)
