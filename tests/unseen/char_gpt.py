"""A character-level GPT in the style of minGPT/nanoGPT (hand-written causal attention,
init std 0.02, AdamW), on generated text over a 65-character vocabulary.

    python char_gpt.py                  # the healthy recipe: lr 3e-4
    python char_gpt.py --lr-x 1000      # the learning rate 1000x too high
    python char_gpt.py --init-std 1.0   # init std 1.0 instead of 0.02: logits far too large
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--lr-x", type=float, default=1.0)
ap.add_argument("--init-std", type=float, default=0.02)
ap.add_argument("--steps", type=int, default=150)
args = ap.parse_args()
torch.manual_seed(1337)

VOCAB, CTX, D, HEADS, LAYERS = 65, 32, 64, 4, 2
# the text: words made of a few characters each, the kind of statistics a char model learns
words = ["".join(chr(33 + (7 * w + 3 * k) % VOCAB) for k in range(2 + w % 5)) for w in range(40)]
g = torch.Generator().manual_seed(0)
text = " ".join(words[i] for i in torch.randint(0, 40, (6000,), generator=g).tolist())
data = torch.tensor([ord(c) - 32 if 32 <= ord(c) < 32 + VOCAB else 0 for c in text])


class CausalSelfAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c_attn = nn.Linear(D, 3 * D)
        self.c_proj = nn.Linear(D, D)
        self.register_buffer("mask", torch.tril(torch.ones(CTX, CTX)).view(1, 1, CTX, CTX))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(D, dim=2)
        q, k, v = (t.view(B, T, HEADS, C // HEADS).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.attn = CausalSelfAttention()
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, D), nn.Embedding(CTX, D)
        self.h = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, VOCAB, bias=False)
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=args.init_std)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1])
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


model = GPT()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4 * args.lr_x, weight_decay=0.1)
for step in range(args.steps):
    ix = torch.randint(0, len(data) - CTX - 1, (16,))
    x = torch.stack([data[i : i + CTX] for i in ix])
    y = torch.stack([data[i + 1 : i + 1 + CTX] for i in ix])
    logits = model(x)
    loss = F.cross_entropy(logits.view(-1, VOCAB), y.view(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if step % 25 == 0:
        print(f"step {step}: loss {loss.item():.4f}")
