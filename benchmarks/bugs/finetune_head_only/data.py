"""Two-moons-like points lifted to 20 dimensions by a fixed random map, 3 classes."""

import torch


def load(n: int = 3000, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 3, (n,), generator=g)
    angle = torch.rand(n, generator=g) * 3.1416 + labels * 2.1
    points = torch.stack([angle.cos(), angle.sin()], 1) * (1 + labels.unsqueeze(1))
    lift = torch.randn(2, 20, generator=g)
    return (points @ lift).tanh() + 0.05 * torch.randn(n, 20, generator=g), labels
