"""Self-attention trained under float16 autocast whose unscaled scores outgrow float16."""

import math

import torch
import torch.nn as nn

torch.manual_seed(15)


class Attention(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.d = d

    def forward(self, h):
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        scores = q @ k.transpose(-2, -1)
        att = torch.softmax(scores / math.sqrt(self.d), dim=-1)
        return att @ v


model = Attention(64)
with torch.no_grad():
    model.qkv.weight.mul_(40)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
h = torch.randn(4, 16, 64) * 3
for step in range(20):
    with torch.autocast("cpu", dtype=torch.float16):
        out = model(h)
        loss = out.float().pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final {loss.item():.4f}")
