# LBFGS with a closure (pytorch/examples time_sequence_prediction's shape) and a MAPE
# loss that divides by the targets, some of which are exactly zero.
import torch
import torch.nn as nn

torch.manual_seed(0)
t = torch.linspace(0, 6.28, 50)[:, None]
target = torch.sin(t).round()  # exact zeros among the targets
model = nn.Sequential(nn.Linear(1, 16), nn.Tanh(), nn.Linear(16, 1))
opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5)


def closure():
    opt.zero_grad()
    pred = model(t)
    loss = ((pred - target) / target).abs().mean()  # MAPE: / 0
    loss.backward()
    return loss


for step in range(3):
    loss = opt.step(closure)
    print(step, loss.item())
