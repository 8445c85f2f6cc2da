"""The program installs its own SIGTERM handler and exit handler, and sends itself SIGTERM
mid-run: its handler asks the loop to stop, the loop saves and returns."""
import atexit
import os
import signal

import torch
import torch.nn as nn

from _zoo import seed, watching

stop = []
signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
atexit.register(lambda: print("exit handler ran"))
seed(28)
model = nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with watching(model, opt):
    for step in range(100):
        if step == 12:
            os.kill(os.getpid(), signal.SIGTERM)
        if stop:
            print("stopping at", step)
            break
        x = torch.randn(8, 3)
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
print("loss", f"{loss.item():.4f}")
