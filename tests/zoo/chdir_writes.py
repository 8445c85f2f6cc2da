"""The program changes into an output folder and writes its metrics and checkpoint there
with relative paths."""
import json
import os

import torch
import torch.nn as nn

from _zoo import seed, watching

seed(33)
os.makedirs("out/metrics", exist_ok=True)
os.chdir("out")
model = nn.Linear(3, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
history = []
with watching(model, opt):
    for step in range(30):
        x = torch.randn(16, 3)
        loss = nn.functional.cross_entropy(model(x), (x.sum(1) > 0).long())
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append(round(loss.item(), 4))
with open("metrics/history.json", "w") as f:
    json.dump(history, f)
print("wrote", os.path.join(os.path.basename(os.getcwd()), "metrics/history.json"), history[-1])
