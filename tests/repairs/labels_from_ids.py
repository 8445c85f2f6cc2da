"""A character model of short product codes, padded to 12; the labels copy the ids, pads and
all, so most of its loss is spent predicting padding."""

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(2)
PAD, VOCAB, SPAN = 0, 20, 12


class Codes(Dataset):
    def __init__(self, count, seed):
        g = torch.Generator().manual_seed(seed)
        self.rows = []
        for _ in range(count):
            n = int(torch.randint(3, 7, (1,), generator=g))
            start = int(torch.randint(1, VOCAB - 8, (1,), generator=g))
            row = torch.full((SPAN,), PAD)
            row[:n] = torch.arange(start, start + n)  # a run of consecutive codes
            self.rows.append(row)

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        ids = self.rows[i]
        return {"input_ids": ids, "attention_mask": (ids != PAD).long(), "labels": ids.clone()}


class TinyLM(nn.Module):
    def __init__(self, width=32):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.cell = nn.GRU(width, width, batch_first=True)
        self.head = nn.Linear(width, VOCAB)

    def forward(self, input_ids, attention_mask=None, labels=None):
        h, _ = self.cell(self.embed(input_ids))
        logits = self.head(h)[:, :-1]
        target = labels[:, 1:]
        return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))


model = TinyLM()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for epoch in range(4):
    for batch in DataLoader(Codes(512, 0), batch_size=32, shuffle=True):
        loss = model(**batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"epoch {epoch} loss {loss.item():.3f}")
