"""Worker for test_guard's DDP test: ``torchrun --nproc_per_node 2 ddp_guard.py OUT COLLECTIVE``.

Rank 1 alone sees a NaN in its gradients at step 3 (written after DDP's all-reduce, as a
rank-local bug would); each rank saves its final parameters to OUT/params-RANK.pt.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import gradoc


def main() -> None:
    out, collective = Path(sys.argv[1]), sys.argv[2] == "1"
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    guard = gradoc.GuardConfig(collective=collective)
    g = torch.Generator().manual_seed(100 + rank)
    with gradoc.watch(model, opt, out=out / f"rank{rank}", guard=guard):
        for step in range(8):
            x = torch.randn(16, 8, generator=g)
            opt.zero_grad()
            F.mse_loss(model(x), x.sum(1, keepdim=True)).backward()
            if step == 3 and rank == 1:
                model.module[0].weight.grad[0, 0] = float("nan")
            opt.step()
    torch.save([p.detach().clone() for p in model.parameters()], out / f"params-{rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
