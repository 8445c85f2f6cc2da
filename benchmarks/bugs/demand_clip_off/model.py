import torch.nn as nn


class Demand(nn.Module):
    def __init__(self, hidden: int = 64) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(12, hidden), nn.Tanh())
        self.out = nn.Linear(hidden, 1)

    def forward(self, x):
        return self.out(self.body(x))
