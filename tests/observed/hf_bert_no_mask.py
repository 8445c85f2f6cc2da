"""A Hugging Face BERT classifier (a small config, no download) that labels names by the
language they come from, trained on padded batches without their ``attention_mask``: the
pad tokens take part in attention, so a name's prediction depends on how much padding its
batch had.

    python hf_bert_no_mask.py [--mask]   # --mask: pass attention_mask (the fix)
"""

import argparse

import torch
from transformers import BertConfig, BertForSequenceClassification

ap = argparse.ArgumentParser()
ap.add_argument("--mask", action="store_true")
ap.add_argument("--steps", type=int, default=30)
args = ap.parse_args()
torch.manual_seed(0)

names = {
    0: ["rossi", "bianchi", "romano", "colombo", "ricci", "marino", "greco", "bruno"],
    1: ["schmidt", "schneider", "fischer", "weber", "meyer", "wagner", "becker", "hoffmann"],
    2: ["tanaka", "suzuki", "takahashi", "watanabe", "ito", "yamamoto", "nakamura", "kobayashi"],
}
PAD, VOCAB, LEN = 0, 30, 12


def encode(batch: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.full((len(batch), LEN), PAD)
    mask = torch.zeros(len(batch), LEN, dtype=torch.long)
    for i, name in enumerate(batch):
        codes = [ord(c) - ord("a") + 2 for c in name[:LEN]]
        ids[i, : len(codes)] = torch.tensor(codes)
        mask[i, : len(codes)] = 1
    return ids, mask


config = BertConfig(
    vocab_size=VOCAB,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=LEN,
    num_labels=3,
    pad_token_id=PAD,
)
model = BertForSequenceClassification(config)
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
pairs = [(n, label) for label, ns in names.items() for n in ns]
for step in range(args.steps):
    pick = torch.randperm(len(pairs))[:8].tolist()
    ids, mask = encode([pairs[i][0] for i in pick])
    labels = torch.tensor([pairs[i][1] for i in pick])
    out = model(input_ids=ids, attention_mask=mask if args.mask else None, labels=labels)
    opt.zero_grad()
    out.loss.backward()
    opt.step()
    if step % 10 == 0:
        print(f"step {step}: loss {out.loss.item():.4f}")
