"""A tanh-squashed Gaussian policy whose log-probability corrects for the squash by hand."""

import torch
import torch.nn as nn

torch.manual_seed(11)


class SquashedPolicy(nn.Module):
    def __init__(self, obs: int, act: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(obs, 64), nn.Tanh(), nn.Linear(64, 2 * act))

    def forward(self, s):
        mu, log_std = self.body(s).chunk(2, dim=-1)
        log_std = log_std.clamp(-5, 2)
        noise = torch.randn_like(mu)
        u = mu + log_std.exp() * noise
        a = torch.tanh(u)
        logp = -0.5 * noise.pow(2) - log_std - 0.9189385 - torch.log(1 - a.pow(2))
        return a, logp.sum(-1)


pi = SquashedPolicy(8, 2)
opt = torch.optim.Adam(pi.parameters(), lr=3e-3)
states = torch.randn(256, 8) * 4
for it in range(60):
    act, logp = pi(states)
    q = -(act - 0.9).pow(2).sum(-1) * 50
    loss = (0.2 * logp - q).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final {loss.item():.3f}")
