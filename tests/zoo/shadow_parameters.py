"""Hyper-parameters kept in `self.parameters` (a dict); the optimizer is given
nn.Module.parameters(model)."""
import torch
import torch.nn as nn

from _zoo import seed, watching


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.parameters = {"width": 16, "depth": 2}
        self.fc1 = nn.Linear(3, self.parameters["width"])
        self.fc2 = nn.Linear(self.parameters["width"], 1)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


seed(2)
model = Regressor()
opt = torch.optim.SGD(nn.Module.parameters(model), lr=0.05, momentum=0.9)
with watching(model, opt):
    for step in range(50):
        x = torch.randn(64, 3)
        y = (x ** 2).sum(1, keepdim=True)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
print("final", f"{loss.item():.4f}", model.parameters)
