"""An encoder shared by two heads, each with its own optimizer that also steps the shared
encoder (tied parameters held by two optimizers)."""
import torch
import torch.nn as nn

from _zoo import seed, watching

seed(13)
encoder = nn.Linear(6, 8)
head_a = nn.Sequential(encoder, nn.ReLU(), nn.Linear(8, 1))
head_b = nn.Sequential(encoder, nn.Tanh(), nn.Linear(8, 2))
opt_a = torch.optim.SGD(head_a.parameters(), lr=0.05)
opt_b = torch.optim.Adam(head_b.parameters(), lr=1e-2)
with watching(head_a, opt_a):
    for step in range(30):
        x = torch.randn(16, 6)
        loss_a = (head_a(x) - x.sum(1, keepdim=True)).pow(2).mean()
        opt_a.zero_grad()
        loss_a.backward()
        opt_a.step()
        loss_b = nn.functional.cross_entropy(head_b(x), (x[:, 0] > 0).long())
        opt_b.zero_grad()
        loss_b.backward()
        opt_b.step()
print("a", f"{loss_a.item():.4f}", "b", f"{loss_b.item():.4f}")
