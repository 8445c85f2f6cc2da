# Optimise an input tensor with torch.autograd.grad; stop at the first NaN loss.
import sys

import torch

torch.manual_seed(0)
x = torch.randn(4, 8, requires_grad=True)


def check(loss, step):
    if not torch.isfinite(loss):
        print(f"step {step}: loss is {loss.item()}; stopping")
        sys.exit(1)


for step in range(50):
    spread = 2.0 - (x**2).mean()
    loss = torch.sqrt(spread)  # NaN once the mean square passes 2
    check(loss, step)
    (g,) = torch.autograd.grad(loss, x)
    x = (x - 40.0 * g).detach().requires_grad_()
    print(step, loss.item())
