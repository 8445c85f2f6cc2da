"""A policy's log-probabilities taken as the log of a softmax, in a lambda."""

import torch

torch.manual_seed(3)
policy = torch.nn.Linear(6, 3)
with torch.no_grad():
    policy.weight.mul_(60.0)
log_prob = lambda logits, a: logits.softmax(-1).log().gather(-1, a[:, None]).squeeze(-1)
opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
for step in range(30):
    s = torch.randn(32, 6) * 3
    a = torch.randint(0, 3, (32,))
    loss = -log_prob(policy(s), a).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final {loss.item():.3f}")
