"""The program logs its own command line and where it lives (as minGPT writes args.txt):
sys.argv as the command line gave it, __file__, __name__, and pickles a class of __main__."""
import os
import pickle
import sys

import torch
import torch.nn as nn

from _zoo import seed, watching


class Config:
    lr = 0.1


seed(40)
with open("args.txt", "w") as f:
    f.write(" ".join(sys.argv))
print("argv", sys.argv, "file", os.path.basename(__file__), os.path.isabs(__file__), __name__)
print("pickled", type(pickle.loads(pickle.dumps(Config()))).__module__)
model = nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=Config.lr)
with watching(model, opt):
    for step in range(10):
        x = torch.randn(8, 2)
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
print("loss", f"{loss.item():.4f}")
