"""Fine-tuning a small CNN on 100 classes: the script swaps in a new head, then freezes "the
backbone" with a loop over ``model.parameters()`` that runs after the swap, so the new head is
frozen too; BatchNorm is then unfrozen, as fine-tuning recipes do. The optimizer is given the
head alone: it holds only parameters that never get a gradient, nothing it steps ever moves,
and the loss sits at ln 100. ``--order right`` freezes before the swap: the head trains (the
norms' gradients, which no optimizer applies, are then a small waste: information).

    python head_frozen_too.py [--steps N] [--order wrong|right]
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=200)
ap.add_argument("--order", choices=["wrong", "right"], default="wrong")
args = ap.parse_args()
torch.manual_seed(0)


class SmallNet(nn.Module):
    def __init__(self, classes: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16)
        self.conv2, self.bn2 = nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32)
        self.fc = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.relu(self.bn2(self.conv2(x)))
        return self.fc(x.mean((2, 3)))


def freeze(model: nn.Module) -> None:
    for p in model.parameters():
        p.requires_grad = False


model = SmallNet(10)  # stands for a backbone trained on 10 classes
if args.order == "right":
    freeze(model)
model.fc = nn.Linear(32, 100)  # the new task's head
if args.order == "wrong":
    freeze(model)
for m in model.modules():
    if isinstance(m, nn.BatchNorm2d):
        m.requires_grad_(True)  # fine-tune the norms' affine parameters too
optimizer = torch.optim.SGD(model.fc.parameters(), lr=2.0, momentum=0.9)

prototypes = torch.randn(100, 3, 16, 16)
for step in range(args.steps):
    y = torch.randint(0, 100, (64,))
    x = prototypes[y] + 0.2 * torch.randn(64, 3, 16, 16)
    loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 30 == 0:
        print(f"step {step} loss {loss.item():.3f}")
