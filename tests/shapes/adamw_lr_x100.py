"""A small transformer language model initialised as GPT-2 is (weights N(0, 0.02)), trained
with AdamW, a linear warm-up over 30 steps and the gradient clipped at 1.0, as the Hugging
Face Trainer does, on sequences from a random Markov chain. With ``--lr-x100`` the rate is
0.1 instead of 1e-3: an Adam step moves every weight by about the rate, five times the
weights' initial size; the clip bounds the gradient, not that step. The loss stalls above
the healthy run's.

    python adamw_lr_x100.py [--steps N] [--lr-x100]
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=300)
ap.add_argument("--lr-x100", action="store_true")
args = ap.parse_args()
torch.manual_seed(0)

VOCAB, LEN, WIDTH = 32, 32, 64
chain = torch.softmax(torch.randn(VOCAB, VOCAB) * 3, dim=-1)  # peaked next-token rows


def batch(n: int = 16) -> torch.Tensor:
    seq = [torch.randint(0, VOCAB, (n,))]
    for _ in range(LEN):
        seq.append(torch.multinomial(chain[seq[-1]], 1).squeeze(-1))
    return torch.stack(seq, dim=1)


class LM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.pos = nn.Parameter(torch.zeros(LEN, WIDTH))
        layer = nn.TransformerEncoderLayer(WIDTH, 4, 4 * WIDTH, dropout=0.0, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(WIDTH, VOCAB)
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        return self.head(self.blocks(self.embed(x) + self.pos, mask=mask, is_causal=True))


model = LM()
lr = 0.1 if args.lr_x100 else 1e-3
opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
warmup = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 30))
for step in range(args.steps):
    seq = batch()
    logits = model(seq[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), seq[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    warmup.step()
    if step % 50 == 0:
        print(f"step {step} loss {loss.item():.4f}")
print(f"final loss {loss.item():.4f}")
