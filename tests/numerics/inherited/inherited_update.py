"""Two heads under Adam with eps=0; the second task's weight is 0 during warm-up."""

import torch
import torch.nn as nn

torch.manual_seed(22)


class TwoTask(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(10, 32), nn.ReLU())
        self.head_a = nn.Linear(32, 1)
        self.head_b = nn.Linear(32, 3)

    def forward(self, x):
        h = self.trunk(x)
        return self.head_a(h), self.head_b(h)


model = TwoTask()
opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=0.0)
x = torch.randn(128, 10)
ya, yb = x[:, :1], x[:, 1:4].argmax(1)
for step in range(20):
    a, b = model(x)
    warm = 0.0 if step < 10 else 1.0
    loss = nn.functional.mse_loss(a, ya) + warm * nn.functional.cross_entropy(b, yb)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final {loss.item():.4f}")
