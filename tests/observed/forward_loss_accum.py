"""A sequence tagger whose forward() returns the loss, in the style of nanoGPT and of
Hugging Face models: ``cross_entropy(..., ignore_index=-1)`` over 40 tags, padded targets
marked -1, the loss divided by 4 gradient-accumulation steps before backward(). Its
layers are initialised from N(0, 1) instead of a scaled init: the loss at step 0 is in the
thousands, against ln 40 = 3.7 for small initial logits.

    python forward_loss_accum.py [--init-std 1.0] [--scaler] [--smoothing 0.0]
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--init-std", type=float, default=1.0)
ap.add_argument("--steps", type=int, default=40)
ap.add_argument("--accum", type=int, default=4)
ap.add_argument("--scaler", action="store_true", help="scale the loss with a GradScaler")
ap.add_argument("--smoothing", type=float, default=0.0)
args = ap.parse_args()
torch.manual_seed(4)

V, TAGS, T, D = 200, 40, 24, 128


class Tagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.mix = nn.Linear(D, D)
        self.head = nn.Linear(D, TAGS)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=args.init_std)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        logits = self.head(torch.relu(self.mix(self.embed(idx))))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(
            logits.view(-1, TAGS),
            targets.view(-1),
            ignore_index=-1,
            label_smoothing=args.smoothing,
        )
        return logits, loss


def batch(n: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    idx = torch.randint(0, V, (n, T))
    tags = idx % TAGS
    lengths = torch.randint(T // 2, T + 1, (n,))
    pad = torch.arange(T)[None, :] >= lengths[:, None]
    return idx.masked_fill(pad, 0), tags.masked_fill(pad, -1)


model = Tagger()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, enabled=args.scaler)
for step in range(args.steps):
    for _ in range(args.accum):
        x, y = batch()
        _, loss = model(x, y)
        loss = loss / args.accum
        scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    if step % 10 == 0:
        print(f"step {step}: loss {loss.item() * args.accum:.4f}")
