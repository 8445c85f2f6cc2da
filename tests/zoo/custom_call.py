"""A module that overrides `__call__` (to type its output), so no forward hook of anyone's
runs for it."""
import torch
import torch.nn as nn

from _zoo import seed, watching


class Typed(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward(x)

    def forward(self, x):
        return self.fc(x)


seed(29)
model = Typed()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
with watching(model, opt):
    for step in range(30):
        x = torch.randn(16, 4)
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
print("loss", f"{loss.item():.4f}")
