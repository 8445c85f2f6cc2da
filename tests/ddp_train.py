"""An unmodified DDP training script for test_distributed.py (run by torchrun, with or
without gradoc). Each rank takes its half of a fixed global batch; with ``--nan`` rank 1
alone gets a constant row at step 3, which its Normalize module divides by a zero std.
"""

import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel


class Normalize(nn.Module):
    """A hand-written feature normalisation without epsilon."""

    def forward(self, x):
        return (x - x.mean(1, keepdim=True)) / x.std(1, keepdim=True)  # BUG: no epsilon


def model_and_data():
    torch.manual_seed(0)
    model = nn.Sequential(Normalize(), nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(6, 32, 8, generator=g)
    return model, x, x.sum(2, keepdim=True)


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model, xs, ys = model_and_data()
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    half = xs.shape[1] // world
    for step in range(6):
        x = xs[step, rank * half : (rank + 1) * half].clone()
        y = ys[step, rank * half : (rank + 1) * half]
        if "--nan" in sys.argv and rank == 1 and step == 3:
            x[0] = 1.0  # a constant row: its features' std is 0
        loss = F.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
