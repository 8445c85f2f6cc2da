"""A tiny GPT-2 learning to count. The batch is padded and masked, but the labels are the
padded input ids: the loss scores predicting the pads as well, which are most of a batch of
short sentences."""

import argparse

import torch
from data import load
from model import make_lm

ap = argparse.ArgumentParser()
ap.add_argument("--epochs", type=int, default=2)
ap.add_argument("--batch", type=int, default=32)
args = ap.parse_args()

torch.manual_seed(0)
sentences = load()
lm = make_lm()
opt = torch.optim.AdamW(lm.parameters(), lr=3e-3)


def collate(batch):
    width = max(len(s) for s in batch)
    ids = torch.zeros(len(batch), width, dtype=torch.long)
    mask = torch.zeros(len(batch), width, dtype=torch.long)
    for i, s in enumerate(batch):
        ids[i, : len(s)] = s
        mask[i, : len(s)] = 1
    return ids, mask


for epoch in range(args.epochs):
    for b in range(0, len(sentences), args.batch):
        ids, mask = collate(sentences[b : b + args.batch])
        out = lm(input_ids=ids, attention_mask=mask, labels=ids)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    print(f"epoch {epoch} loss {out.loss.item():.4f}")
print(f"loss {out.loss.item():.4f}")
