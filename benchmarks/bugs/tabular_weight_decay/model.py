import torch.nn as nn


def make_mlp() -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10)
    )
