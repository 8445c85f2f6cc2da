"""The model keeps the handles of its own forward hooks in `self.hooks`, counts activations
with them, and removes them half way."""
import torch
import torch.nn as nn

from _zoo import seed, watching


class Probed(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 8)
        self.b = nn.Linear(8, 1)
        self.seen = 0
        self.hooks = [m.register_forward_hook(self._count) for m in (self.a, self.b)]

    def _count(self, module, args, output):
        self.seen += 1

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


seed(7)
model = Probed()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
with watching(model, opt):
    for step in range(30):
        if step == 15:
            for h in model.hooks:
                h.remove()
            model.hooks = []
        x = torch.randn(8, 4)
        loss = (model(x) - 1).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
print("forward hooks saw", model.seen, "loss", f"{loss.item():.4f}")
