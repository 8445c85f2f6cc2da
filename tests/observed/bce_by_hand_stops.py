"""A classifier trained with a hand-written binary cross-entropy,
-(y * log(p) + (1 - y) * log(1 - p)) with p = sigmoid(logit). The data are separable, so
the logits grow until sigmoid rounds to exactly 1.0 in float32; then (1 - y) * log(1 - p)
is 0 * -inf = NaN. The loop checks its loss and stops, exit code 0: the NaN never reaches
backward().

    python bce_by_hand_stops.py [--steps N]
"""

import argparse

import torch
import torch.nn as nn

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=400)
args = ap.parse_args()
torch.manual_seed(11)

n, d = 256, 12
x = torch.randn(n, d) * 3
y = (x[:, 0] + 0.5 * x[:, 1] > 0).float()

model = nn.Sequential(nn.Linear(d, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.5)
for step in range(args.steps):
    p = torch.sigmoid(model(x).squeeze(1))
    loss = -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()
    if not torch.isfinite(loss):
        print(f"step {step}: loss is {loss.item()}, stopping")
        break
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 20 == 0:
        print(f"step {step}: loss {loss.item():.4f}")
print("finished")
