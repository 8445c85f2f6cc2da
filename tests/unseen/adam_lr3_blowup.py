"""A 4-class MLP with Adam at lr 3.0 (meant 3e-3): the loss blows up to ~1e5 within ten
steps, then falls back to exactly chance (ln 4) with a layer of dead ReLUs."""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
functional = "--functional" in sys.argv


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(20, 128), nn.Linear(128, 128), nn.Linear(128, 4)
        self.act1, self.act2 = nn.ReLU(), nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if functional:  # the ReLUs as functions, no module of their own
            return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))
        return self.fc3(self.act2(self.fc2(self.act1(self.fc1(x)))))


model = Net()
opt = torch.optim.Adam(model.parameters(), lr=3.0)
w = torch.randn(20, 4)
for step in range(300):
    x = torch.randn(64, 20)
    y = (x @ w).argmax(1)
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 25 == 0:
        print(step, round(loss.item(), 4))
