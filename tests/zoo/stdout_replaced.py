"""A Tee logger replaces sys.stdout: everything printed goes to the terminal and to
train.log."""
import sys

import torch
import torch.nn as nn

from _zoo import seed, watching


class Tee:
    def __init__(self, path):
        self.terminal, self.log = sys.stdout, open(path, "w")

    def write(self, text):
        self.terminal.write(text)
        self.log.write(text)

    def flush(self):
        self.terminal.flush()
        self.log.flush()


sys.stdout = Tee("train.log")
seed(24)
model = nn.Linear(6, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with watching(model, opt):
    for step in range(30):
        x = torch.randn(16, 6)
        loss = nn.functional.cross_entropy(model(x), x[:, :3].argmax(1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0:
            print("step", step, f"{loss.item():.4f}")
sys.stdout.flush()
