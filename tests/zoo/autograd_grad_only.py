"""Gradients from torch.autograd.grad, written into .grad by hand, then optimizer.step():
no backward() call in the program."""
import torch
import torch.nn as nn

from _zoo import seed, watching

seed(27)
model = nn.Sequential(nn.Linear(3, 6), nn.Tanh(), nn.Linear(6, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
params = list(model.parameters())
with watching(model, opt):
    for step in range(30):
        x = torch.randn(16, 3)
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        grads = torch.autograd.grad(loss, params)
        for p, g in zip(params, grads):
            p.grad = g
        opt.step()
print("loss", f"{loss.item():.4f}")
