"""The loss is summed in a Python loop from the float 0.0, one sample at a time, then
averaged: `loss = 0.0; loss += ...`."""
import torch
import torch.nn as nn

from _zoo import seed, watching

seed(35)
model = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
with watching(model, opt):
    for step in range(25):
        batch = torch.randn(8, 3)
        loss = 0.0
        for x in batch:
            loss += (model(x) - x.sum()).pow(2).sum()
        loss = loss / len(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
print("loss", f"{loss.item():.4f}")
