"""The program forks a child that writes a file and leaves with os._exit; the parent waits,
reads it and trains."""
import os

import torch
import torch.nn as nn

from _zoo import seed, watching

seed(22)
model = nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with watching(model, opt):
    pid = os.fork()
    if pid == 0:
        with open("child.txt", "w") as f:
            f.write("scale=2\n")
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    scale = float(open("child.txt").read().split("=")[1])
    print("child exited", os.waitstatus_to_exitcode(status), "scale", scale)
    for step in range(30):
        x = torch.randn(16, 3)
        loss = (model(x) - scale * x.sum(1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
print("loss", f"{loss.item():.4f}")
