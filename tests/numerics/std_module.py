"""Per-sample standardisation in a model; blank (constant) samples have std 0."""

import torch
import torch.nn as nn

torch.manual_seed(12)


class Standardise(nn.Module):
    def forward(self, x):
        return (x - x.mean(1, keepdim=True)) / x.std(1, keepdim=True)


model = nn.Sequential(Standardise(), nn.Linear(12, 1))
x = torch.randn(40, 12)
x[5] = 0.7
y = x[:, :1]
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(30):
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final {loss.item():.3f}")
