"""Properties that raise until set up (`device` on a model never moved) or compute with a
side effect (`num_params` prints)."""
import torch
import torch.nn as nn

from _zoo import seed, watching


class Lazy(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self._device = None

    @property
    def device(self):
        if self._device is None:
            raise RuntimeError("call .place() first")
        return self._device

    @property
    def num_params(self):
        print("counting parameters")
        return sum(p.numel() for p in self.parameters())

    @property
    def config(self):
        raise NotImplementedError("no config on this model")

    def forward(self, x):
        return self.fc(x)


seed(10)
model = Lazy()
print(model.num_params)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
with watching(model, opt):
    for step in range(30):
        x = torch.randn(16, 4)
        loss = nn.functional.cross_entropy(model(x), x.argmax(1) % 3)
        opt.zero_grad()
        loss.backward()
        opt.step()
print("loss", f"{loss.item():.4f}")
