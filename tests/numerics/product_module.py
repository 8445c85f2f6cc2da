"""A bag-of-experts agreement score: a product of probabilities taken by method, then log."""

import torch
import torch.nn as nn

torch.manual_seed(5)


class Agreement(nn.Module):
    def __init__(self):
        super().__init__()
        self.experts = nn.Linear(4, 300)

    def forward(self, x):
        probs = torch.softmax(torch.stack([self.experts(x), -self.experts(x)], -1), -1)[..., 0]
        return probs.prod(-1).log()


model = Agreement()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
x = torch.randn(32, 4)
for step in range(30):
    loss = -model(x).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final {loss.item():.3f}")
