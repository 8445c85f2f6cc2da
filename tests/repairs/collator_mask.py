"""Sorts words into two classes with a small transformer encoder; its collator pads each batch
to its longest word and forgets the mask."""

import torch
from torch import nn
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader

torch.manual_seed(11)
PAD, VOCAB = 0, 30


class Encoder(nn.Module):
    def __init__(self, width=32):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width, padding_idx=PAD)
        self.place = nn.Embedding(16, width)
        layer = nn.TransformerEncoderLayer(width, 4, 64, dropout=0.0, batch_first=True)
        self.body = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(width, 2)

    def forward(self, input_ids, attention_mask=None, labels=None):
        at = torch.arange(input_ids.shape[1])
        h = self.embed(input_ids) + self.place(at)
        pads = None if attention_mask is None else attention_mask == 0
        h = self.body(h, src_key_padding_mask=pads)
        keep = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        pooled = (h * keep[..., None]).sum(1) / keep.sum(1, keepdim=True)
        return nn.functional.cross_entropy(self.head(pooled), labels)


class PadWords:
    """Pads a list of (tokens, label) pairs into one batch."""

    def __call__(self, pairs):
        tokens = [torch.tensor(t) for t, _ in pairs]
        return dict(
            input_ids=pad_sequence(tokens, batch_first=True, padding_value=PAD),
            labels=torch.tensor([y for _, y in pairs]),
        )


def word(g):
    n = int(torch.randint(2, 15, (1,), generator=g))
    tokens = torch.randint(1, VOCAB, (n,), generator=g).tolist()
    return tokens, int(sum(t % 2 for t in tokens) * 2 > n)  # more odd tokens than even


g = torch.Generator().manual_seed(0)
words = [word(g) for _ in range(1024)]
loader = DataLoader(words, batch_size=32, shuffle=True, collate_fn=PadWords())
model = Encoder()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for epoch in range(3):
    for batch in loader:
        loss = model(**batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"epoch {epoch} loss {loss.item():.3f}")
