"""Lightning: ``trainer = Trainer(callbacks=[GradocCallback(out="runs/x")])``.

The run attaches at ``on_fit_start`` to the LightningModule and the trainer's optimizers,
without optimizer hooks: Lightning calls ``optimizer.step(closure)``, and the closure runs
forward and backward *inside* the step, so the statistics are taken at
``on_before_optimizer_step`` (gradients exist, the update has not happened) and finished at
``on_train_batch_end``. The loss is captured at ``backward()`` as everywhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback

from ..collect import prepare_run_dir
from ..collect.run import Run
from ..config import WatchConfig
from ..runtime.finish import write_outputs
from ..store import EventKind


class GradocCallback(Callback):  # type: ignore[misc]
    def __init__(self, out: str | Path | None = None, **options: Any) -> None:
        super().__init__()
        self.out, self.config = out, WatchConfig(**options)
        self.run: Run | None = None
        self._stepped: list[Any] = []

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self.run = Run(prepare_run_dir(self.out, "lightning"), self.config, finish=write_outputs)
        for opt in trainer.optimizers:
            self.run.attach(pl_module, getattr(opt, "optimizer", opt), hooks=False)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, *args: Any) -> None:
        if self.run is not None:
            self.run.begin_step()  # training_step, not forward(): the loss is still ours

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        if self.run is not None:
            opt = getattr(optimizer, "optimizer", optimizer)
            self.run.pre_step(opt)
            self._stepped.append(opt)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, *args: Any) -> None:
        if self.run is not None:
            for opt in self._stepped:
                self.run.post_step(opt)
        self._stepped = []

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        if self.run is not None:
            self.run.close()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        if self.run is not None:
            self.run.event(EventKind.CRASH, f"{type(exception).__name__}: {exception}")
            self.run.close("crashed")
