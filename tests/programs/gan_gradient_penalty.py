# A WGAN-GP step: torch.autograd.grad for the gradient penalty comes before the first
# optimizer step; the optimizers count the steps, the penalty is not a step.
import torch
import torch.nn as nn

torch.manual_seed(0)
G = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
D = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 1))
opt_g = torch.optim.Adam(G.parameters(), lr=1e-3)
opt_d = torch.optim.Adam(D.parameters(), lr=1e-3)
for step in range(6):
    real = torch.randn(32, 2)
    fake = G(torch.randn(32, 4)).detach()
    eps = torch.rand(32, 1)
    mixed = (eps * real + (1 - eps) * fake).requires_grad_()
    (grad,) = torch.autograd.grad(D(mixed).sum(), mixed, create_graph=True)
    penalty = ((grad.norm(dim=1) - 1) ** 2).mean()
    loss_d = D(fake).mean() - D(real).mean() + 10 * penalty
    opt_d.zero_grad()
    loss_d.backward()
    opt_d.step()
    loss_g = -D(G(torch.randn(32, 4))).mean()
    opt_g.zero_grad()
    loss_g.backward()
    opt_g.step()
    print(step, loss_d.item(), loss_g.item())
