"""Synthetic 8x8 "digits": ten prototype images, each sample a noisy, shifted copy."""

import torch


def load(n: int = 3000, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    protos = (torch.rand(10, 1, 8, 8, generator=g) > 0.6).float()
    labels = torch.randint(0, 10, (n,), generator=g)
    images = protos[labels] * 4.0 + 2.0 + 0.8 * torch.randn(n, 1, 8, 8, generator=g)
    return images, labels
