"""Synthetic daily demand: 12 calendar and price features, demand a noisy linear function of
them on a large scale (the units sold, not normalised)."""

import torch


def load(n: int = 2048, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 12, generator=g) * 3
    coef = torch.randn(12, 1, generator=g)
    demand = x @ coef + 0.1 * torch.randn(n, 1, generator=g)
    return x, demand
