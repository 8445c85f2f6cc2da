"""The loop ends with `raise SystemExit("...")`: python prints the message and exits 1."""
import torch
import torch.nn as nn

from _zoo import seed, watching

seed(20)
model = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
with watching(model, opt):
    for step in range(20):
        x = torch.randn(16, 2)
        loss = (model(x) - x.abs().sum(1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("checked", f"{loss.item():.4f}")
    raise SystemExit("budget exhausted after 20 steps")
