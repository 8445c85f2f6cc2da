"""A tiny GPT-2 (built from a config, no download) trained on padded batches of a small
repeating language, with ``labels=input_ids`` as many scripts write it: the padded
positions (the pad token is the end-of-text token, as GPT-2 has no other) are scored too,
and the loss learns to predict pads. ``--ignore-pads`` sets the labels to -100 there: the
healthy run.

    python hf_gpt2_labels_pads.py [--steps N] [--ignore-pads]
"""

import argparse

import torch
import transformers

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=60)
ap.add_argument("--ignore-pads", action="store_true")
args = ap.parse_args()
torch.manual_seed(0)
transformers.logging.set_verbosity_error()

config = transformers.GPT2Config(vocab_size=40, n_positions=64, n_embd=32, n_layer=2, n_head=4)
model = transformers.GPT2LMHeadModel(config)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
PAD = config.eos_token_id if config.eos_token_id < 40 else 39

for step in range(args.steps):
    lengths = torch.randint(4, 32, (16,))
    ids = torch.full((16, 32), PAD)
    for i, n in enumerate(lengths.tolist()):
        start = int(torch.randint(1, 10, ()))
        ids[i, :n] = (torch.arange(n) * start) % 30 + 1  # a sequence the model can learn
    mask = (torch.arange(32) < lengths[:, None]).long()
    labels = ids.masked_fill(mask == 0, -100) if args.ignore_pads else ids
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    opt.zero_grad()
    out.loss.backward()
    opt.step()
    if step % 20 == 0:
        print(f"step {step} loss {out.loss.item():.4f}")
