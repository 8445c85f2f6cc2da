"""An angular loss: acos of a cosine computed by hand; some pairs are the same vector."""

import torch

torch.manual_seed(22)
f = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(f.parameters(), lr=0.05)
for step in range(30):
    u = torch.randn(32, 4)
    v = torch.randn(32, 4)
    v[:8] = u[:8]
    a, b = f(u), f(v)
    cos = (a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1))
    loss = torch.acos(cos).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final {loss.item():.3f}")
