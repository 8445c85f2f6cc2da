"""A synthetic housing table: 8 features, a price that is a noisy non-linear function of them."""

import torch


def load(n: int = 4096, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    price = x[:, 0] * 2 + x[:, 1] * x[:, 2] - x[:, 3].abs() + 0.1 * torch.randn(n, generator=g)
    return x, price.unsqueeze(1)
