"""Synthetic "reviews": token sequences of 4 to 40 tokens over a 60-token vocabulary; a review
is positive when it holds more "good" tokens (10-19) than "bad" ones (20-29)."""

import torch


def load(n: int = 1200, seed: int = 0) -> list[tuple[torch.Tensor, int]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        length = int(torch.randint(4, 41, (1,), generator=g))
        ids = torch.randint(1, 60, (length,), generator=g)
        good = int(((ids >= 10) & (ids < 20)).sum())
        bad = int(((ids >= 20) & (ids < 30)).sum())
        out.append((ids, int(good > bad)))
    return out
