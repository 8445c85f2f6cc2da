"""A model whose `__getattr__` raises RuntimeError (not AttributeError) for names it does not
know, as a strict config object would; `config` and `device` among them."""
import torch
import torch.nn as nn

from _zoo import seed, watching


class Strict(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(20, 8, padding_idx=0)
        self.out = nn.Linear(8, 2)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            raise RuntimeError(f"Strict has no setting {name!r}") from None

    def forward(self, ids):
        return self.out(self.embed(ids).mean(1))


seed(8)
model = Strict()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
with watching(model, opt):
    for step in range(30):
        ids = torch.randint(1, 20, (16, 6))
        ids[:, 4:] = 0
        loss = nn.functional.cross_entropy(model(ids), (ids[:, 0] > 10).long())
        opt.zero_grad()
        loss.backward()
        opt.step()
try:
    model.device
except RuntimeError as exc:
    print("as designed:", exc)
print("loss", f"{loss.item():.4f}")
