"""A synthetic 10-class task: 32 features, classes by a fixed random projection."""

import torch


def load(n: int = 2048, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 32, generator=g)
    return x, (x @ torch.randn(32, 10, generator=g)).argmax(1)
