"""Hugging Face: ``Trainer(..., callbacks=[GradocCallback(out="runs/x")])``.

The Trainer creates its optimizer before ``on_train_begin`` and calls ``optimizer.step()``
after backward, so the run attaches there with gradoc's ordinary optimizer hooks (on the
optimizer Accelerate wraps, when it does). ``on_train_end`` closes the run and writes the
report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from ..api import watch
from ..collect.run import Run


class GradocCallback(TrainerCallback):  # type: ignore[misc]
    def __init__(self, out: str | Path | None = None, **options: Any) -> None:
        self.out, self.options = out, options
        self.run: Run | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        model, optimizer = kwargs.get("model"), kwargs.get("optimizer")
        if model is None or optimizer is None:
            return
        inner = getattr(optimizer, "optimizer", optimizer)  # Accelerate's wrapper
        self.run = watch(model, inner, out=self.out, **self.options)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.run is not None:
            self.run.close()
