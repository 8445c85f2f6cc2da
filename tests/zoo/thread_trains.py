"""Training runs in a worker thread (a GUI or a server keeps the main one); the main thread
joins it and prints what it left."""
import threading

import torch
import torch.nn as nn

from _zoo import seed, watching

seed(23)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
losses = []


def train():
    with watching(model, opt):
        for step in range(30):
            x = torch.randn(16, 4)
            loss = (model(x) - x.max(1, keepdim=True).values).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())


worker = threading.Thread(target=train)
worker.start()
worker.join()
print("steps", len(losses), "last", f"{losses[-1]:.4f}")
