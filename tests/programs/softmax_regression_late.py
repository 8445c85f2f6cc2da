# softmax regression from scratch, minibatches read in order from a large table: the softmax
# is written out with exp, and one row deep in the table was stored in other units (x1000);
# when its batch comes, thousands of steps in, exp overflows and inf / inf is NaN
import torch

torch.manual_seed(0)
X = torch.randn(400_000, 4)
X[380_000] *= 1000.0
y = (X[:, 0] > 0).long() + (X[:, 1] > 0).long()
W = torch.zeros(4, 3, requires_grad=True)
b = torch.zeros(3, requires_grad=True)
lr, batch = 0.1, 32
for step in range(len(X) // batch):
    xb, yb = X[step * batch : (step + 1) * batch], y[step * batch : (step + 1) * batch]
    e = torch.exp(xb @ W + b)
    probs = e / e.sum(dim=1, keepdim=True)
    loss = -torch.log(probs[torch.arange(batch), yb]).mean()
    loss.backward()
    with torch.no_grad():
        W -= lr * W.grad
        b -= lr * b.grad
        W.grad.zero_()
        b.grad.zero_()
    if step % 2000 == 0:
        print(step, round(loss.item(), 4))
