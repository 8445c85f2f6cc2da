# A mixture density network (three Gaussians) fitting y's spread as a function of a 1-D x,
# its negative log-likelihood written out with logsumexp. Healthy: the NLL falls below 0.
import math

import torch
from torch import nn

torch.manual_seed(8)
x = torch.rand(2048, 1)
y = (
    torch.sin(6 * x)
    + 0.1 * torch.randn(2048, 1) * (1 + 3 * x)
    + torch.where(torch.rand(2048, 1) < 0.3, 1.5, 0.0)
)


class MDN(nn.Module):
    def __init__(self, k=3):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(1, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.head = nn.Linear(32, 3 * k)

    def forward(self, x):
        logits, mu, log_sigma = self.head(self.body(x)).chunk(3, dim=-1)
        return logits.log_softmax(-1), mu, log_sigma.clamp(-7, 5)


model = MDN()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for step in range(1500):
    idx = torch.randint(0, 2048, (256,))
    log_pi, mu, log_sigma = model(x[idx])
    z = (y[idx] - mu) / log_sigma.exp()
    log_prob = -0.5 * z**2 - log_sigma - 0.5 * math.log(2 * math.pi)
    nll = -torch.logsumexp(log_pi + log_prob, dim=-1).mean()
    opt.zero_grad()
    nll.backward()
    opt.step()
    if step % 300 == 0:
        print(step, round(nll.item(), 3))
print("final", round(nll.item(), 3))
