"""The watched run: a model and its optimizers, watched by probes around one host read.

A :class:`Run` attaches (models' hooks: ``watched``; optimizers' step hooks: ``steps``),
holds the run log's writer and closes (last statistics, probes' summaries, the run's end;
then ``finish`` writes the report and sinks). Within a step: ``steps``; what is measured:
the probes chosen once by :func:`probes_for`; the device is read by ``packet``, once."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.nn as nn
from torch.optim import Optimizer

from .._util import entry
from .._util.display import Shown
from .._util.json_types import JsonObject
from .._util.objects import IdMap
from .._util.text import one_line
from ..config import WatchConfig
from ..guard import Guard, GuardGaveUp, scale_lr
from ..guard import lr as guard_lr
from ..store import EventKind, RunWriter, Stopped
from ..store.writer import insert_rows
from . import termination
from ._safety import finish_safely, forget, remember, sigint_deferred
from .attach import Watched, logged, param_rows, taps
from .probes import Locator
from .resume import Resumption, opening_meta
from .step import Steps, probes_for

Finish = Callable[[Path, "str | Path | None", "Stopped | None", dict[str, str]], JsonObject]
"""What writes a closed run's report and sinks (see ``Run(finish=...)``)."""


class Run(Shown):
    """A watched training run writing its log to ``dir/run.db``.

    Made by :func:`gradoc.watch` (or ``gradoc run``); use it as a context manager or call
    :meth:`close` so the log is complete and ``report.json`` is written. In Jupyter it
    shows its report once closed (``report/notebook.py``).
    """

    def __init__(
        self,
        directory: Path,
        config: WatchConfig,
        *,
        script: str | None = None,
        lr_scale: float = 1.0,
        finish: Finish | None = None,
        resume: bool = False,
    ) -> None:
        """``lr_scale``: multiply every optimizer's learning rates (schedules included) when
        it is attached: ``gradoc run --lr-scale`` and ``--fix`` try a rate without an edit.
        ``finish(dir, json_path, stopped, sinks)``: called with the complete log at
        :meth:`close`, it writes what the run leaves (the report, the sinks) and returns the
        report (``gradoc.runtime.finish.write_outputs``); without one only the log is written.
        ``resume``: continue the log in ``directory`` as a new segment (``resume``)."""
        self.dir = Path(os.path.abspath(directory))  # fixed now: the script may chdir
        self.config, self._finish, self._lr_scale = config, finish, lr_scale
        self.closed = self.broken = False
        self._writer = RunWriter(self.dir / "run.db", resume=resume, **config.writer_options())
        prev = self._writer.previous
        self.t0 = time.monotonic() - (prev.time_s if prev else 0.0)  # a segment's time goes on
        self.put = self._writer.put
        self.set_meta(**opening_meta(config, script, lr_scale, prev))
        self.find_owners: Callable[[set[int]], list[nn.Module]] | None = None
        """Set by ``gradoc run``: the modules that ran and own some of these tensors."""
        self.attach_early: Callable[[Optimizer], None] | None = None  # gradoc run: at a clip
        self._handles: list[Any] = []
        if lr_scale != 1.0:
            guard_lr.install()  # before the script makes its schedulers: scale_lr finds them
        self.guard = Guard.of(config, self.event)  # skipping non-finite steps is its, always
        """The run's guard (``state_dict()`` / ``load_state_dict()`` carry it across a
        resumed job); None when non-finite steps are not skipped."""
        self.module_names: IdMap[nn.Module, str] = IdMap()
        """Every watched module's name in the run's layer names."""
        self.locator = Locator(self.module_names)
        """Where the run's non-finite origins are found (``gradoc run`` arms it)."""
        self.watched = Watched(self, probes := probes_for(self, config), self.module_names)
        self.steps = Steps(self, probes)
        self.steps.resumption = Resumption(self, prev) if prev is not None else None
        # the step protocol (used by gradoc run, Lightning and the Hugging Face callback)
        self.before_step, self.pre_step = self.steps.before_step, self.steps.pre_step
        self.post_step, self.begin_step = self.steps.post_step, self.steps.begin_step
        self.record_origin, self.step_listeners = self.steps.record_origin, self.steps.listeners
        """Called with ("stats", step) once a step's statistics are read and with ("end",
        step) once it ended (``gradoc.runtime.replay`` arms its trace from them)."""
        taps.add_receiver(self.steps)
        self.logged = logged.open_for(self.put, lambda: self.steps.count)  # its own measures
        remember(self)  # the program's exit, or a SIGTERM, closes it

    @property
    def step(self) -> int:
        """The current step: steps completed so far."""
        return self.steps.count

    @property
    def counts_backward(self) -> bool:
        """Steps are counted at ``backward()`` calls (a program without an optimizer)."""
        return self.steps.manual.target is not None

    def watches(self, optimizer: Optimizer) -> bool:
        """The optimizer is attached to this run."""
        return optimizer in self.steps.targets

    def attach(
        self,
        models: nn.Module | list[nn.Module],
        optimizer: Optimizer | None,
        *,
        hooks: bool = True,
    ) -> None:
        """Watch ``optimizer`` and the ``models`` owning its parameters; with no optimizer,
        watch the models of a program that updates its tensors itself (steps are then its
        ``backward()`` calls, see ``manual``).

        With ``hooks=False`` the caller routes optimizer steps to :meth:`pre_step` and
        :meth:`post_step` itself (``gradoc run`` does, through global optimizer hooks).
        """
        if self.closed:
            raise RuntimeError("this gradoc run is closed")
        if optimizer in self.steps.targets:
            return
        several = self.attach_early is not None and len(taps.live_optimizers()) > 1  # to come
        new_roots = self.watched.roots(models if isinstance(models, list) else [models], several)
        if optimizer is None:
            self.watched.watch_modules(new_roots)
            return
        taps.note_optimizer(optimizer)
        self.steps.manual.stop()  # steps were counted at backward() until an optimizer stepped
        watched, n = self.watched, len(self.steps.targets)
        params, rows = param_rows(watched.prefixes, optimizer, n, watched.next_id)
        watched.next_id += len(rows)
        rows += watched.module_rows(new_roots)
        self.steps.add(optimizer, params)
        self.steps.counted_by("optimizer.step()")
        if self.guard is not None:
            self.guard.watch(optimizer)
        if self._lr_scale != 1.0:
            scale_lr(optimizer, self._lr_scale)
            scaled = f"learning rates x{self._lr_scale:g} (applied by gradoc)"
            self.event(EventKind.LR_SCALED, scaled)
        self.put(lambda conn: insert_rows(conn, "layers", rows))
        if hooks:
            self._handles += self.steps.hook(optimizer)

    def guard_summary(self) -> JsonObject | None:
        """What the guard has done so far (skipped, clipped, rollbacks, ...); None without one."""
        guard = self.guard
        return guard.summary().to_json() if guard is not None and guard.every_step else None

    def set_meta(self, **items: Any) -> None:
        """Record facts about the run (JSON values) in the run log's ``meta`` table."""
        self._writer.set_meta(**items)

    def event(self, kind: EventKind, message: str, step: int | None = None, **data: Any) -> None:
        """Record an event in the run log (shown in reports)."""
        at = self.step if step is None else step
        row = (None, at, time.monotonic() - self.t0, kind, message, json.dumps(data, default=str))
        self.put(lambda conn: insert_rows(conn, "events", [row]))

    def flush(self) -> None:
        """Write everything collected so far to the run log (waits for the writer)."""
        if not self.closed:
            if self.steps.transfers.unsent():
                self.steps.transfers.send()
            self._writer.flush()

    def close(
        self, status: str = "finished", exit_code: int | None = None, json_path: Any = None
    ) -> JsonObject | None:
        """Stop watching, complete the run log and write ``report.json`` (and ``json_path``).

        Returns the report; a second call does nothing and returns None.
        """
        if self.closed:
            return None
        with termination.closing():  # a SIGTERM that comes meanwhile waits for the report
            with sigint_deferred(self.dir):  # a second Ctrl-C must not cost the log
                self._complete_log(status, exit_code)
            if self._finish is None:
                return None
            stopped = None
            if self._writer.error is not None:  # the log lacks the end of the run: say so
                error = one_line(self._writer.error)
                stopped = Stopped(error, self.step, status, exit_code)
            finish, sinks = self._finish, dict(self.config.sinks)
            return finish_safely(self, lambda: finish(self.dir, json_path, stopped, sinks))

    def _complete_log(self, status: str, exit_code: int | None) -> None:
        """Unhook, let the probes finish, send the last statistics and close the run log.
        The program calls it (``close``, a ``with`` block's end, its exit): the probes' last
        work is skipped once gradoc failed, and said if it fails (``_util.entry``)."""
        meta = entry.call(self.steps.close, where="collect.run.Run.close", fallback={})
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self.watched.remove()
        taps.remove_receiver(self.steps)
        if self.guard is not None:
            self.guard.close()
        if self._lr_scale != 1.0:
            guard_lr.uninstall()
        entry.call(self.steps.transfers.send_last, where="collect.run.Run.close")
        self.set_meta(
            status=termination.status(status, exit_code, self.event),
            exit_code=exit_code,
            ended_at=time.time(),
            duration_s=round(time.monotonic() - self.t0, 3),
            steps=self.step,
            skipped_updates=self.guard.skipped if self.guard is not None else 0,
            # without an optimizer a step ends at the next backward(): one may be under way
            ended_mid_step=self.watched.forward_seen or self.counts_backward,
            guard=self.guard_summary(),
            logged=logged.close(self.logged),  # the program's own measures
            **meta,
        )
        self.closed = True
        self._writer.close()
        forget(self)

    def __enter__(self) -> Run:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None:
            self.close()
            return
        if isinstance(exc, GuardGaveUp):  # its own event says why
            self.close("gave_up")
            return
        if isinstance(exc, SystemExit):  # the program's own exit: its code says how it went
            self.close(*termination.exited(exc.code))
            return
        interrupted = isinstance(exc, KeyboardInterrupt)
        kind = EventKind.INTERRUPTED if interrupted else EventKind.CRASH
        self.event(kind, f"{type(exc).__name__}: {exc}")
        self.close("interrupted" if interrupted else "crashed")

    def __repr__(self) -> str:
        return f"<gradoc.Run {str(self.dir)!r} step={self.step}{' closed' if self.closed else ''}>"
