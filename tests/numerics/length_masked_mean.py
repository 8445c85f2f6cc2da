"""A masked mean over tokens; one row of a batch is all padding."""

import torch

torch.manual_seed(17)
emb = torch.nn.Embedding(20, 4)
head = torch.nn.Linear(4, 1)
opt = torch.optim.SGD([*emb.parameters(), *head.parameters()], lr=0.1)


def pooled(ids, mask):
    h = emb(ids) * mask[..., None]
    return h.sum(1) / mask.sum(1, keepdim=True)


for step in range(30):
    ids = torch.randint(1, 20, (6, 7))
    mask = (torch.rand(6, 7) > 0.3).float()
    if step == 3:
        mask[4] = 0.0
    loss = (head(pooled(ids, mask)) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final {loss.item():.3f}")
