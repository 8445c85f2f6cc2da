"""A classifier of 10 Gaussian clusters whose head ends in ``softmax`` and whose loss is
``F.nll_loss``: NLL wants log-probabilities, so the loss is minus the probability of the
right class, between -1 and 0, and its gradient vanishes wherever the model is confidently
wrong. ``--log`` gives it ``log_softmax`` (the fix).

    python nll_on_softmax.py [--steps N] [--log]
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=300)
ap.add_argument("--log", action="store_true")
args = ap.parse_args()
torch.manual_seed(0)

means = torch.randn(10, 20) * 1.5


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(20, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.fc2(F.relu(self.fc1(x)))
        return F.log_softmax(x, dim=1) if args.log else F.softmax(x, dim=1)


net = Net()
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
for step in range(args.steps):
    y = torch.randint(0, 10, (64,))
    x = means[y] + torch.randn(64, 20)
    loss = F.nll_loss(net(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 50 == 0:
        print(f"step {step} loss {loss.item():.4f}")
