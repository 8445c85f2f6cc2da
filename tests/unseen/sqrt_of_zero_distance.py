"""A siamese embedding trained on pair distances sqrt(sum((a - b)^2)). From step 15 the
pair sampler also returns identical pairs; sqrt'(0) is inf, so their gradients are NaN."""

import torch
import torch.nn as nn

torch.manual_seed(0)
net = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 4))
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
data = torch.randn(256, 8)
labels = (data[:, 0] > 0).long()
for step in range(60):
    i = torch.randint(0, 256, (32,))
    j = torch.randint(0, 256, (32,))
    if step >= 15:
        j[:4] = i[:4]  # the sampler's bug: a sample paired with itself
    a, b = net(data[i]), net(data[j])
    dist = torch.sqrt(((a - b) ** 2).sum(1))
    same = (labels[i] == labels[j]).float()
    loss = (same * dist**2 + (1 - same) * torch.relu(1.0 - dist) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 10 == 0:
        print(step, loss.item())
