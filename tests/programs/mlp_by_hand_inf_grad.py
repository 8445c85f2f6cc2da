# A raw-tensor network updated by hand: a distance feature sqrt(|zi - zj|^2) is finite
# forward, but its gradient at i == j (distance 0) is infinite.
import torch

torch.manual_seed(0)
X = torch.randn(32, 6)
Y = torch.randn(32, 1)
W1 = (torch.randn(6, 8) * 0.5).requires_grad_()
W2 = (torch.randn(32, 1) * 0.1).requires_grad_()
params = [W1, W2]
for step in range(8):
    z = X @ W1
    dist = torch.sqrt(((z[:, None, :] - z[None, :, :]) ** 2).sum(-1))  # 0 on the diagonal
    loss = ((dist @ W2 - Y) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        for p in params:
            p -= 0.01 * p.grad
            p.grad = None
    print(step, loss.item())
