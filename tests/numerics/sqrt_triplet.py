"""A triplet loss with Euclidean distances written by hand; some positives equal anchors."""

import torch

torch.manual_seed(18)
net = torch.nn.Linear(5, 3)
opt = torch.optim.SGD(net.parameters(), lr=0.05)
for step in range(30):
    a, p, n = torch.randn(16, 5), torch.randn(16, 5), torch.randn(16, 5)
    p[:4] = a[:4]
    ea, ep, en = net(a), net(p), net(n)
    d_ap = torch.sqrt(((ea - ep) ** 2).sum(-1))
    d_an = torch.sqrt(((ea - en) ** 2).sum(-1))
    loss = torch.relu(d_ap - d_an + 1.0).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final {loss.item():.3f}")
