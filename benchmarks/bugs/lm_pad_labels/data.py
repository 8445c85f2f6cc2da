"""Synthetic "sentences" for a language model: counting runs (5 6 7 8 ...) starting anywhere,
3 to 24 tokens long, over a 40-token vocabulary whose token 0 is the pad."""

import torch


def load(n: int = 1500, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        length = int(torch.randint(3, 25, (1,), generator=g))
        start = int(torch.randint(1, 40 - length, (1,), generator=g))
        out.append(torch.arange(start, start + length))
    return out
