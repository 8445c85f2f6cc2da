"""A logistic regression with two unrelated accidents: at step 2 one batch arrives with its
features x100 (a unit bug), the SGD step it makes throws the weights far and the loss stays
up for a few steps before it comes back; at step 600 one record of a batch holds a NaN (a
corrupted row), the gradient is NaN, the update writes it into the weights and the loss is
NaN to the end. The NaN is the headline: it is what is wrong when the run ends.

    python late_nan_after_blowup.py [--steps N]
"""

import argparse

import torch
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=800)
args = ap.parse_args()
torch.manual_seed(0)

true_w = torch.randn(16)
w = torch.zeros(16, requires_grad=True)
b = torch.zeros(1, requires_grad=True)
opt = torch.optim.SGD([w, b], lr=0.5)
for step in range(args.steps):
    x = torch.randn(64, 16)
    y = (x @ true_w > 0).float()
    if step == 2:
        x = x * 100.0  # a shard in the wrong unit
    if step == 600:
        x[5, 3] = float("nan")  # a corrupted record
    loss = F.binary_cross_entropy_with_logits(x @ w + b, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 100 == 0 or step < 30:
        print(f"step {step} loss {loss.item():.4f}")
