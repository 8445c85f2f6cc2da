"""gradoc: a training-stability doctor for PyTorch.

>>> import torch, gradoc
>>> model = torch.nn.Linear(4, 1)
>>> optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
>>> with gradoc.watch(model, optimizer, out=tmp_path / "run") as run:
...     for _ in range(3):
...         loss = model(torch.randn(8, 4)).pow(2).mean()
...         optimizer.zero_grad(); loss.backward(); optimizer.step()
>>> gradoc.open_run(run.dir).num_steps
3
"""

from ._finish import watch
from ._version import __version__
from .collect import Run
from .config import GuardConfig, WatchConfig
from .errors import GradocError
from .guard import GuardGaveUp
from .locate.numerics import NumericsError, check_numerics
from .locate.padding import audit_padding
from .schedule import every, log_spaced, never
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
    "check_numerics",
    "every",
    "log_spaced",
    "never",
    "open_run",
    "plan_checkpointing",
    "watch",
]
