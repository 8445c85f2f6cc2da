import torch.nn as nn


def make_mlp(width: int = 64) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(1, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh(), nn.Linear(width, 1)
    )
