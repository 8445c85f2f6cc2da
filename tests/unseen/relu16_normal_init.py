"""A 16-layer ReLU MLP initialised from N(0, 1): activations and gradients ~1e21 at step 0."""

import torch
import torch.nn as nn

torch.manual_seed(0)
layers: list[nn.Module] = []
for _ in range(16):
    lin = nn.Linear(64, 64)
    nn.init.normal_(lin.weight, 0.0, 1.0)  # "standard normal init", no fan-in scaling
    layers += [lin, nn.ReLU()]
model = nn.Sequential(*layers, nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
for step in range(40):
    x = torch.randn(32, 64)
    loss = (model(x) - x[:, :1]).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 10 == 0:
        print(step, loss.item(), float(model[0].weight.grad.abs().max()))
