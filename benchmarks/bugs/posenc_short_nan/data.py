"""Batches of 4-dim readings, bucketed by length (every sequence of a batch as long); the
target is the mean of the first channel. Some batches hold sequences one reading long."""

import torch


def load(batches: int = 300, size: int = 32, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(batches):
        length = int(torch.randint(1, 12, (1,), generator=g))
        x = torch.randn(size, length, 4, generator=g)
        out.append((x, x[:, :, 0].mean(1, keepdim=True)))
    return out
