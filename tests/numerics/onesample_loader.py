"""A batch-statistics regulariser; the DataLoader's last batch holds one sample."""

import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(15)
xs = torch.randn(33, 3)
data = TensorDataset(xs, xs @ torch.tensor([1.0, -1.0, 0.5]) + 0.01 * torch.randn(33))
net = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.05)


def spread_penalty(pred):
    return (torch.std(pred) - 1.0) ** 2


for epoch in range(3):
    for xb, yb in DataLoader(data, batch_size=16):
        pred = net(xb).squeeze(-1)
        loss = ((pred - yb) ** 2).mean() + 0.1 * spread_penalty(pred)
        opt.zero_grad()
        loss.backward()
        opt.step()
print(f"final {loss.item():.3f}")
