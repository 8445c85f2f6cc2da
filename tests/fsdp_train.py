"""An FSDP2 (fully_shard) training script for test_distributed.py: each rank writes the
full (unsharded) gradient norms of step 0, as torch computes them, to OUT/norms-RANK.json."""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard


def main():
    out = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(10 + rank)
    for step in range(4):
        x = torch.randn(16, 8, generator=g)
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        if step == 0:
            norms = {n: float(p.grad.full_tensor().norm()) for n, p in model.named_parameters()}
            (out / f"norms-{rank}.json").write_text(json.dumps(norms))
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
