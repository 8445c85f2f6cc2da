"""Samples of a sum of sines, to regress from the phase."""

import torch


def load(n: int = 2048, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(n, 1, generator=g) * 6.2832
    return t, torch.sin(t) + 0.5 * torch.sin(3 * t) + 0.05 * torch.randn(n, 1, generator=g)
