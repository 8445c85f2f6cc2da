"""A regression whose loop prints a metric it computes without gradients (the log of the
absolute error, which is -inf once a prediction is exact) and stops when the metric is
not finite. Before training it prints its best-so-far sentinel, inf. The loss and the
gradients stay finite: what turned non-finite is only printed.

    python metric_nan_printed.py [--never]   # --never: the metric never hits an exact zero
"""

import argparse
import math

import torch
import torch.nn as nn

ap = argparse.ArgumentParser()
ap.add_argument("--never", action="store_true")
args = ap.parse_args()
torch.manual_seed(0)

model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
best = math.inf
print(f"best so far: {best}")
for step in range(40):
    x = torch.randn(16, 4)
    pred = model(x)
    loss = (pred - x.sum(1, keepdim=True)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    error = pred.detach() - x.sum(1, keepdim=True)
    if step == 25 and not args.never:
        error[0] = 0.0  # an exact prediction
    metric = error.abs().log().mean()
    print(f"step {step}: loss {loss.item():.4f} log-error {metric.item():.3f}")
    if not math.isfinite(metric.item()):
        break
    best = min(best, loss.item())
print(f"best: {best:.4f}")
