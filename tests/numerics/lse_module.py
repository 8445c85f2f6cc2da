"""A mixture density network whose log-likelihood sums the components' densities by hand."""

import torch
import torch.nn as nn

torch.manual_seed(0)


class MixtureNLL(nn.Module):
    def forward(self, params, y):
        logit, mu, log_s = params.chunk(3, dim=-1)
        comp = torch.log_softmax(logit, -1) - 0.5 * ((y - mu) / log_s.exp()) ** 2 - log_s
        return -comp.exp().sum(-1).log().mean()


net = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 12))
crit = MixtureNLL()
opt = torch.optim.Adam(net.parameters(), lr=3e-3)
x = torch.rand(256, 1) * 2 - 1
y = 30 + 5 * torch.sin(4 * x)
for step in range(40):
    loss = crit(net(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final {loss.item():.3f}")
