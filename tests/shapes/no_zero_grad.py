"""A character-level GRU language model whose loop lost its ``optimizer.zero_grad()``:
each step's gradient is the running sum of every earlier one.

    python no_zero_grad.py [--steps N] [--zero-grad]
"""

import argparse

import torch
import torch.nn as nn

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=120)
ap.add_argument("--zero-grad", action="store_true", help="the fixed loop")
args = ap.parse_args()
torch.manual_seed(0)

g = torch.Generator().manual_seed(1)
data = torch.randint(0, 48, (3000,), generator=g)  # a 48-letter alphabet, weakly structured
data[1::3] = (data[::3][: len(data[1::3])] * 7) % 48
V = 48


class CharRNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, 32)
        self.rnn = nn.GRU(32, 64, batch_first=True)
        self.head = nn.Linear(64, V)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, _ = self.rnn(self.emb(x))
        return self.head(h)


model = CharRNN()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(args.steps):
    i = torch.randint(0, len(data) - 33, (16,))
    x = torch.stack([data[j : j + 32] for j in i])
    y = torch.stack([data[j + 1 : j + 33] for j in i])
    if args.zero_grad:
        opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))
    loss.backward()
    opt.step()
    if step % 20 == 0:
        print(f"step {step} loss {loss.item():.4f}")
