# A healthy from-scratch loop: linear regression with a hand-written SGD.
import torch

torch.manual_seed(0)
X = torch.randn(256, 4)
true_w = torch.tensor([[1.5], [-2.0], [0.5], [3.0]])
Y = X @ true_w + 0.1 * torch.randn(256, 1)
w = torch.zeros(4, 1, requires_grad=True)
b = torch.zeros(1, requires_grad=True)
for step in range(60):
    loss = ((X @ w + b - Y) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        w -= 0.1 * w.grad
        b -= 0.1 * b.grad
        w.grad.zero_()
        b.grad.zero_()
    print(step, repr(loss.item()))
