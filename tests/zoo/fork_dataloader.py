"""A DataLoader with two forked workers, a seeded generator and a worker_init_fn."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from _zoo import seed, watching

seed(21)
xs = torch.randn(256, 5)
ys = xs @ torch.randn(5, 1)
g = torch.Generator().manual_seed(0)
loader = DataLoader(
    TensorDataset(xs, ys),
    batch_size=32,
    shuffle=True,
    num_workers=2,
    generator=g,
    multiprocessing_context="fork",
    worker_init_fn=lambda i: torch.manual_seed(i),
)
model = nn.Linear(5, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
with watching(model, opt):
    for epoch in range(3):
        for x, y in loader:
            loss = (model(x) - y).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        print("epoch", epoch, f"{loss.item():.4f}")
