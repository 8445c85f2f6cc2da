"""Per-sample gradients with torch.func (vmap of grad over functional_call), clipped per
sample as DP-SGD does, summed into .grad by hand; no backward() at all."""
import torch
import torch.nn as nn
from torch.func import functional_call, grad, vmap

from _zoo import seed, watching

seed(16)
model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
params = {k: v.detach() for k, v in model.named_parameters()}


def loss_one(p, x, y):
    out = functional_call(model, p, (x.unsqueeze(0),))
    return (out.squeeze() - y) ** 2


with watching(model, opt):
    for step in range(20):
        x = torch.randn(16, 3)
        y = x.sum(1)
        params = {k: v.detach() for k, v in model.named_parameters()}
        per = vmap(grad(loss_one), in_dims=(None, 0, 0))(params, x, y)
        norms = torch.stack([g.flatten(1).norm(dim=1) for g in per.values()]).norm(dim=0)
        scale = (1.0 / norms.clamp(min=1.0)).view(-1)
        for name, p in model.named_parameters():
            g = per[name]
            p.grad = (g * scale.view(-1, *([1] * (g.dim() - 1)))).mean(0)
        opt.step()
        if step % 5 == 0:
            with torch.no_grad():
                print(step, f"{(model(x).squeeze() - y).pow(2).mean():.4f}")
