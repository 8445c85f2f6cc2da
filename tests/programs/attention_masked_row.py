# A NaN born in a softmax inside an attention module: a query whose keys are all masked.
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class Attention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x, mask):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        att = (q @ k.transpose(-2, -1)) / q.shape[-1] ** 0.5
        att = att.masked_fill(~mask[:, None, :], float("-inf"))
        att = F.softmax(att, dim=-1)  # a row with every key masked: all NaN
        return self.proj(att @ v)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.attn = Attention(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        x = x + self.attn(x, mask)
        return x + self.mlp(x)


class Model(nn.Module):
    def __init__(self, vocab=20, d=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([Block(d), Block(d)])
        self.out = nn.Linear(d, vocab)

    def forward(self, ids, mask):
        x = self.emb(ids)
        for block in self.blocks:
            x = block(x, mask)
        return self.out(x)


model = Model()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(6):
    ids = torch.randint(0, 20, (4, 10))
    mask = torch.ones(4, 10, dtype=torch.bool)
    if step == 3:
        mask[2] = False  # an empty sample: nothing to attend to
    logits = model(ids, mask)
    loss = F.cross_entropy(logits.reshape(-1, 20), ids.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(step, loss.item())
