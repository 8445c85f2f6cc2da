"""A tiny BERT (built from a config, no download) classifying variable-length token
sequences by whether they hold token 7, fed by a hand-written collator that pads
``input_ids`` with the config's pad token (0) and passes no ``attention_mask``: every real
token attends to the pads. ``--mask`` passes the mask: the healthy run.

    python hf_bert_no_mask.py [--steps N] [--mask]
"""

import argparse

import torch
import transformers

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=60)
ap.add_argument("--mask", action="store_true")
args = ap.parse_args()
torch.manual_seed(0)
transformers.logging.set_verbosity_error()

config = transformers.BertConfig(
    vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
    intermediate_size=64, num_labels=2, pad_token_id=0,
)  # fmt: skip
model = transformers.BertForSequenceClassification(config)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)


def collate(seqs: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)  # 0: the pad token
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = s
    batch = {"input_ids": ids}
    if args.mask:
        batch["attention_mask"] = (ids != 0).long()
    return batch


for step in range(args.steps):
    seqs = [torch.randint(1, 50, (int(n),)) for n in torch.randint(4, 24, (16,))]
    labels = torch.tensor([int((s == 7).any()) for s in seqs])
    out = model(**collate(seqs), labels=labels)
    opt.zero_grad()
    out.loss.backward()
    opt.step()
    if step % 20 == 0:
        print(f"step {step} loss {out.loss.item():.4f}")
