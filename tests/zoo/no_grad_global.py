"""Autograd is off for the whole program (`torch.set_grad_enabled(False)`) and turned on only
inside the training step."""
import torch
import torch.nn as nn

from _zoo import seed, watching

torch.set_grad_enabled(False)
seed(36)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with watching(model, opt):
    for step in range(30):
        x = torch.randn(16, 4)
        with torch.enable_grad():
            loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
        opt.step()
        model(x)  # an evaluation, without autograd
print("grad enabled:", torch.is_grad_enabled(), "loss", f"{loss.item():.4f}")
