"""Embeddings normalised by their norm; some inputs embed to the zero vector."""

import torch
import torch.nn as nn

torch.manual_seed(10)
enc = nn.Sequential(nn.Linear(6, 16, bias=False), nn.ReLU())
x = torch.randn(32, 6)
x[::8] = 0.0
opt = torch.optim.SGD(enc.parameters(), lr=0.1)
for step in range(30):
    z = enc(x)
    z = z / z.norm(dim=1, keepdim=True)
    sim = z @ z.T
    loss = -torch.log_softmax(sim / 0.5, 1).diagonal().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final {loss.item():.3f}")
