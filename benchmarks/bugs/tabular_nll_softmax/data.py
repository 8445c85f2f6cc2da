"""A synthetic tabular task: 16 features, 5 classes given by a fixed random projection."""

import torch


def load(n: int = 1024, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 16, generator=g)
    return x, (x[:, :4] @ torch.randn(4, 5, generator=g)).argmax(1)
