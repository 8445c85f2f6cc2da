"""A causal language model of short words, batched by a collator of its own that pads the ids
and the targets with the pad token and returns no mask: the model attends to the pads and its
loss scores them."""

import torch
from torch import nn
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader

torch.manual_seed(13)
PAD, VOCAB, WIDTH = 0, 20, 32


class WordLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH, padding_idx=PAD)
        self.place = nn.Embedding(16, WIDTH)
        layer = nn.TransformerEncoderLayer(WIDTH, 4, 64, dropout=0.0, batch_first=True)
        self.body = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, input_ids, attention_mask=None, labels=None):
        n = input_ids.shape[1]
        h = self.embed(input_ids) + self.place(torch.arange(n))
        future = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
        pads = None if attention_mask is None else attention_mask == 0
        h = self.body(h, mask=future, src_key_padding_mask=pads)
        logits = self.head(h)[:, :-1]
        return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), labels[:, 1:].reshape(-1))


class Batch:
    def __call__(self, words):
        rows = [torch.tensor(w) for w in words]
        ids = pad_sequence(rows, batch_first=True, padding_value=PAD)
        targets = pad_sequence(rows, batch_first=True, padding_value=PAD)
        return {"input_ids": ids, "labels": targets}


def word(g):
    n = int(torch.randint(2, 12, (1,), generator=g))
    first = int(torch.randint(1, VOCAB - 12, (1,), generator=g))
    return list(range(first, first + n))  # consecutive tokens: learnable


g = torch.Generator().manual_seed(0)
loader = DataLoader([word(g) for _ in range(512)], batch_size=32, shuffle=True, collate_fn=Batch())
model = WordLM()
opt = torch.optim.Adam(model.parameters(), lr=2e-3)
for epoch in range(3):
    for batch in loader:
        loss = model(**batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"epoch {epoch} loss {loss.item():.3f}")
