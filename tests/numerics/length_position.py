"""Relative positions pos / (length - 1) for a batch whose lengths include 1."""

import torch
import torch.nn as nn

torch.manual_seed(16)


class RelPos(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(2, 1)

    def forward(self, x, lengths):
        pos = torch.arange(x.shape[1]).float().expand(x.shape[0], -1)
        rel = pos / (lengths[:, None] - 1)
        return self.proj(torch.stack([x, rel], -1)).squeeze(-1).sum(1)


model = RelPos()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(30):
    lengths = torch.randint(2, 6, (8,)).float()
    if step == 4:
        lengths[2] = 1.0
    x = torch.randn(8, 5)
    loss = (model(x, lengths) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final {loss.item():.3f}")
