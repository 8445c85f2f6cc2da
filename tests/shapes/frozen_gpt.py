"""A small GPT whose blocks were left frozen (``requires_grad=False`` from a fine-tuning
recipe applied to a model trained from scratch): only the embeddings' positional table
and the head's bias train, and the loss stalls.

    python frozen_gpt.py [--steps N]
"""

import argparse

import torch
import torch.nn as nn

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=120)
args = ap.parse_args()
torch.manual_seed(0)

V, T, D = 64, 16, 64


class GPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Embedding(T, D)
        layer = nn.TransformerEncoderLayer(D, 4, 4 * D, dropout=0.0, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, 2)
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, V)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.tok(x) + self.pos(torch.arange(x.shape[1]))
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        return self.head(self.ln(self.blocks(h, mask=mask, is_causal=True)))


model = GPT()
for name, p in model.named_parameters():  # "freeze the backbone": everything but pos/head.bias
    p.requires_grad = name in ("pos.weight", "head.bias")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = torch.randint(0, V, (4000,))
data[1::2] = (data[::2] + 1) % V  # learnable: every second token follows the one before
for step in range(args.steps):
    i = torch.randint(0, len(data) - T - 1, (16,))
    x = torch.stack([data[j : j + T] for j in i])
    y = torch.stack([data[j + 1 : j + T + 1] for j in i])
    loss = nn.functional.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 20 == 0:
        print(f"step {step} loss {loss.item():.4f}")
