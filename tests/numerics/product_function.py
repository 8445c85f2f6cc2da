"""A sequence likelihood as the product of 200 per-step probabilities, then its log."""

import torch

torch.manual_seed(4)
w = torch.nn.Parameter(torch.zeros(8))
x = torch.randn(16, 200, 8)
target = (x[..., 0] > 0).float()


def seq_log_likelihood(w):
    p = torch.sigmoid(x @ w)
    step_prob = torch.where(target > 0, p, 1 - p)
    return torch.log(torch.prod(step_prob, dim=1))


opt = torch.optim.SGD([w], lr=0.01)
for step in range(30):
    loss = -seq_log_likelihood(w).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final {loss.item():.3f}")
