"""Sentiment of variable-length reviews with a tiny BERT. The collator pads the token ids
with the pad token and the loop passes no attention_mask: every real token attends to the
pads, and a short review is mostly pads."""

import argparse

import torch
from data import load
from model import make_classifier

ap = argparse.ArgumentParser()
ap.add_argument("--epochs", type=int, default=6)
ap.add_argument("--batch", type=int, default=32)
args = ap.parse_args()

torch.manual_seed(0)
reviews = load()
bert = make_classifier()
opt = torch.optim.AdamW(bert.parameters(), lr=2e-3)


def pad(batch):
    width = max(len(ids) for ids, _ in batch)
    ids = torch.zeros(len(batch), width, dtype=torch.long)
    for i, (seq, _) in enumerate(batch):
        ids[i, : len(seq)] = seq
    return ids, torch.tensor([label for _, label in batch])


for epoch in range(args.epochs):
    for b in range(0, len(reviews), args.batch):
        token_ids, labels = pad(reviews[b : b + args.batch])
        out = bert(token_ids, labels=labels)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    print(f"epoch {epoch} loss {out.loss.item():.4f}")
print(f"loss {out.loss.item():.4f}")
