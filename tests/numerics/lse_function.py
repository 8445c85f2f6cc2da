"""A CRF-style forward score whose log-sum-exp over tags dropped the max subtraction."""

import torch

torch.manual_seed(1)
T, K = 12, 5
emit = torch.nn.Parameter(torch.randn(T, K))
trans = torch.nn.Parameter(torch.randn(K, K) * 0.1)
start = torch.full((K,), -10000.0)  # no tag may start a sentence but the first
start[0] = -9000.0

tags = torch.randint(0, K, (T,))


def log_partition(emit, trans):
    alpha = start + emit[0]
    for t in range(1, T):
        scores = alpha.unsqueeze(1) + trans + emit[t].unsqueeze(0)
        alpha = torch.log(torch.sum(torch.exp(scores), dim=0))
    return torch.log(torch.sum(torch.exp(alpha)))


def gold(emit, trans):
    s = start[tags[0]] + emit[0, tags[0]]
    for t in range(1, T):
        s = s + trans[tags[t - 1], tags[t]] + emit[t, tags[t]]
    return s


opt = torch.optim.SGD([emit, trans], lr=0.05)
for step in range(30):
    nll = log_partition(emit, trans) - gold(emit, trans)
    opt.zero_grad()
    nll.backward()
    opt.step()
print(f"final {nll.item():.3f}")
