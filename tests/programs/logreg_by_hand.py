# from-scratch logistic regression: log(sigmoid) and a hand-written SGD
import torch

torch.manual_seed(0)
X = torch.randn(200, 5) * 30
y = (X[:, 0] > 0).float()
w = torch.zeros(5, requires_grad=True)
b = torch.zeros(1, requires_grad=True)
lr = 0.5
for epoch in range(20):
    p = torch.sigmoid(X @ w + b)
    loss = -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()
    loss.backward()
    with torch.no_grad():
        w -= lr * w.grad
        b -= lr * b.grad
        w.grad.zero_()
        b.grad.zero_()
    print(epoch, loss.item())
