"""Hidden features z-scored with torch.std; one feature is constant across the batch."""

import torch

torch.manual_seed(13)
w = torch.nn.Parameter(torch.randn(6, 4))


def zscore(h):
    return (h - h.mean(0)) / torch.std(h, dim=0)


x = torch.randn(50, 6)
x[:, 2] = 1.0
w.data[:, 3] = 0.0
w.data[2, 3] = 1.0
y = torch.randn(50)
opt = torch.optim.SGD([w], lr=0.01)
for step in range(30):
    loss = ((zscore(x @ w).sum(1) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final {loss.item():.3f}")
