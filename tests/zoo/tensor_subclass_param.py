"""A parameter of a subclass of nn.Parameter that carries a tag and sees every op on it
(`__torch_function__`), as quantisation and sharding libraries' parameters do."""
import torch
import torch.nn as nn

from _zoo import seed, watching


class Tagged(nn.Parameter):
    def __new__(cls, data, tag):
        t = super().__new__(cls, data)
        t.tag = tag
        return t

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = Tagged(torch.randn(4, 1) * 0.1, "scale")

    def forward(self, x):
        return x @ self.weight


seed(17)
model = Scaled()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with watching(model, opt):
    for step in range(30):
        x = torch.randn(16, 4)
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
print(type(model.weight).__name__, model.weight.tag, f"{loss.item():.4f}")
