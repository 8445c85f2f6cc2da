"""The model and its optimizer are built again between two phases (a wider model, trained
from scratch), the first ones dropped."""
import contextlib

import torch
import torch.nn as nn

from _zoo import seed, watching

seed(18)
for width in (4, 16):
    model = nn.Sequential(nn.Linear(3, width), nn.ReLU(), nn.Linear(width, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    # one gradoc.watch run per process: the first phase (gradoc run sees both)
    with watching(model, opt) if width == 4 else contextlib.nullcontext():
        for step in range(25):
            x = torch.randn(32, 3)
            loss = (model(x) - x.prod(1, keepdim=True)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    print("width", width, f"{loss.item():.4f}")
    del model, opt
