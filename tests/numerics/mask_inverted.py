"""A tiny decoder whose causal mask is given the wrong way round."""
import torch
from torch import nn

torch.manual_seed(3)


class Decoder(nn.Module):
    def __init__(self, vocab=16, width=24, span=12):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, vocab)
        self.register_buffer("allowed", torch.tril(torch.ones(span, span, dtype=torch.bool)))

    def forward(self, ids):
        n = ids.shape[1]
        h = self.embed(ids)
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        scores = q @ k.transpose(1, 2) / q.shape[-1] ** 0.5
        scores = scores.masked_fill(self.allowed[:n, :n], float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return self.out(h + weights @ v)


net = Decoder()
opt = torch.optim.AdamW(net.parameters(), lr=3e-3)
for step in range(60):
    ids = torch.randint(0, 16, (8, 12))
    ids[:, 1::2] = ids[:, 0::2]  # every second token repeats the one before it
    logits = net(ids[:, :-1])
    loss = nn.functional.cross_entropy(logits.reshape(-1, 16), ids[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final loss {loss.item():.3f}")
