"""A sharpness-aware optimizer (SAM) whose `step(closure)` calls the closure twice: once
at the weights, once at the perturbed weights; the closure calls backward() itself."""
import torch
import torch.nn as nn

from _zoo import seed, watching


class SAM(torch.optim.Optimizer):
    def __init__(self, params, base, rho=0.05, **kwargs):
        super().__init__(params, dict(rho=rho, **kwargs))
        self.base = base(self.param_groups, **kwargs)

    @torch.no_grad()
    def step(self, closure):
        with torch.enable_grad():
            closure()
        norm = torch.norm(torch.stack([p.grad.norm() for g in self.param_groups for p in g["params"] if p.grad is not None]))
        saved = []
        for g in self.param_groups:
            for p in g["params"]:
                e = p.grad * g["rho"] / (norm + 1e-12)
                p.add_(e)
                saved.append((p, e))
        with torch.enable_grad():
            loss = closure()
        for p, e in saved:
            p.sub_(e)
        self.base.step()
        return loss


seed(14)
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
opt = SAM(model.parameters(), torch.optim.SGD, lr=0.05)
with watching(model, opt):
    for step in range(25):
        x = torch.randn(32, 4)
        y = x.pow(2).sum(1, keepdim=True)

        def closure():
            opt.zero_grad()
            loss = (model(x) - y).pow(2).mean()
            loss.backward()
            return loss

        loss = opt.step(closure)
        if step % 8 == 0:
            print(step, f"{loss.item():.4f}")
