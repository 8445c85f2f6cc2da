"""`training` is a property backed by the model's own phase (set by train()/eval() as
nn.Module sets it), printing nothing but counting its reads."""
import torch
import torch.nn as nn

from _zoo import seed, watching


class Phased(nn.Module):
    def __init__(self):
        self._phase = "train"
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.Dropout(0.2), nn.Linear(16, 1))

    @property
    def training(self):
        return self._phase == "train"

    @training.setter
    def training(self, value):
        self._phase = "train" if value else "eval"


seed(5)
model = Phased()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
with watching(model, opt):
    for step in range(40):
        model.train()
        x = torch.randn(32, 4)
        loss = (model.net(x) - x.sum(1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 19:
            model.eval()
            with torch.no_grad():
                print("eval", f"{(model.net(x) - x.sum(1, keepdim=True)).pow(2).mean():.4f}")
print("phase", model._phase)
