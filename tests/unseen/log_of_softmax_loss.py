"""A hand-written loss that takes the log of a probability which can be exactly 0: after
a warm-up of 6 steps the softmax is made "sparse" (every class outside the 3 most likely
is zeroed), and on harder samples the true class is sometimes outside them, so the loss
is inf on those steps. The learning rate is high enough for large updates, which are a
consequence here, not the cause."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
centers = torch.randn(10, 16)
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.8)


def topk_softmax(logits: torch.Tensor, k: int = 3) -> torch.Tensor:
    kth = logits.topk(k, dim=1).values[:, -1:]
    masked = logits.masked_fill(logits < kth, float("-inf"))
    return F.softmax(masked, dim=1)


for step in range(120):
    y = torch.randint(0, 10, (32,))
    x = centers[y] + 1.0 * torch.randn(32, 16)
    probs = topk_softmax(model(x), k=10 if step < 6 else 3)
    loss = -torch.log(probs[torch.arange(len(y)), y]).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 20 == 0:
        print(step, loss.item())
