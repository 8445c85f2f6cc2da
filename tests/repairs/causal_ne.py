"""A two-head decoder over sequences that count up by a hidden step; its causal mask hides the
positions it should keep (`!= 0` where `== 0` belongs)."""

import torch
from torch import nn
from torch.nn import functional as F

torch.manual_seed(12)
SPAN, VOCAB, WIDTH = 10, 24, 32


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)
        ones = torch.ones(SPAN, SPAN)
        self.register_buffer("causal", torch.tril(ones).view(1, 1, SPAN, SPAN))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, 2, c // 2).transpose(1, 2) for z in self.qkv(x).split(c, dim=2))
        att = (q @ k.transpose(-2, -1)) / (c // 2) ** 0.5
        att = att.masked_fill(self.causal[:, :, :t, :t] != 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return x + self.proj(y.transpose(1, 2).reshape(b, t, c))


embed, block, head = nn.Embedding(VOCAB, WIDTH), Block(), nn.Linear(WIDTH, VOCAB)
params = [*embed.parameters(), *block.parameters(), *head.parameters()]
opt = torch.optim.Adam(params, lr=3e-3)
for _ in range(150):
    start, stride = torch.randint(0, 4, (16, 1)), torch.randint(1, 3, (16, 1))
    seq = (start + stride * torch.arange(SPAN + 1)) % VOCAB
    logits = head(block(embed(seq[:, :-1])))
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), seq[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final loss {loss.item():.3f}")
