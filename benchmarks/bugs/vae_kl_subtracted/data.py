"""Points from 6 Gaussian clusters in 16 dimensions."""

import torch


def load(n: int = 4096, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(6, 16, generator=g) * 2
    which = torch.randint(0, 6, (n,), generator=g)
    return centres[which] + 0.3 * torch.randn(n, 16, generator=g)
