import torch.nn as nn


class PriceNet(nn.Module):
    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh())
        self.price = nn.Linear(width, 1)

    def forward(self, x):
        return self.price(self.net(x))
