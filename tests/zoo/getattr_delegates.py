"""A wrapper whose `__getattr__` delegates unknown names to the model it wraps and prints
each delegation (a side effect a watcher must never trigger)."""
import torch
import torch.nn as nn

from _zoo import seed, watching


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 1)
        self.config = {"scale": 2.0}

    def forward(self, x):
        return self.fc(x) * self.config["scale"]


class Wrapper(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            print(f"delegating {name}")
            return getattr(self.inner, name)

    def forward(self, x):
        return self.inner(x)


seed(9)
model = Wrapper(Inner())
opt = torch.optim.SGD(model.parameters(), lr=0.02)
print("scale", model.config["scale"])
with watching(model, opt):
    for step in range(30):
        x = torch.randn(16, 3)
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
print("loss", f"{loss.item():.4f}")
