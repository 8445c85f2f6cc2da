"""A focal-style weight (1 - p) ** 1.5 where p is not a probability but a raw score."""

import torch

torch.manual_seed(25)
clf = torch.nn.Linear(5, 1)


def weighted(score, t):
    return (torch.pow(1 - score, 1.5) * (score - t) ** 2).mean()


opt = torch.optim.SGD(clf.parameters(), lr=0.01)
for step in range(30):
    x = torch.randn(40, 5)
    t = (x[:, 0] > 0).float()
    loss = weighted(clf(x).squeeze(-1), t)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final {loss.item():.3f}")
