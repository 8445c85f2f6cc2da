"""Inverse propensity weighting with a learned propensity: the control arm weighs 1 / (1 - e)."""

import torch
import torch.nn as nn

torch.manual_seed(14)


class Propensity(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.score = nn.Linear(5, 1)

    def forward(self, x, treated, y):
        e = self.score(x).sigmoid().squeeze(-1)
        w = treated / e + (1 - treated) / (1 - e)
        return (w * (y - y.mean()) ** 2).sum() / w.sum()


x = torch.randn(400, 5) * 8
treated = (x[:, 0] > 0).float()
y = x[:, 1] + treated
model = Propensity()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
for step in range(40):
    loss = model(x, treated, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final {loss.item():.4f}")
