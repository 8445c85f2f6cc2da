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

from .api import *  # noqa: F403  (the public API: gradoc.api)
from .api import __all__ as __all__
