"""A Hugging Face GPT-2 language model (a small config, no download) fine-tuned on padded
batches whose ``labels`` are the input ids, pads included: the loss counts predicting the
pad token after the end of every short sequence. The fix is labels = -100 at the pads.

    python hf_gpt2_pad_labels.py [--ignore-pads]
"""

import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel

ap = argparse.ArgumentParser()
ap.add_argument("--ignore-pads", action="store_true")
ap.add_argument("--steps", type=int, default=20)
args = ap.parse_args()
torch.manual_seed(0)

VOCAB, LEN, PAD = 64, 16, 63  # the pad token is the end-of-text token, as GPT-2 recipes set
config = GPT2Config(
    vocab_size=VOCAB,
    n_positions=LEN,
    n_embd=32,
    n_layer=2,
    n_head=2,
    bos_token_id=PAD,
    eos_token_id=PAD,
)
model = GPT2LMHeadModel(config)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(args.steps):
    lengths = torch.randint(4, LEN + 1, (8,))
    real = torch.arange(LEN)[None, :] < lengths[:, None]
    ids = torch.randint(0, VOCAB - 1, (8, LEN)).masked_fill(~real, PAD)
    labels = ids.masked_fill(~real, -100) if args.ignore_pads else ids.clone()
    out = model(input_ids=ids, attention_mask=real.long(), labels=labels)
    opt.zero_grad()
    out.loss.backward()
    opt.step()
    if step % 10 == 0:
        print(f"step {step}: loss {out.loss.item():.4f}")
