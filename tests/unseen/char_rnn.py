"""A character-level vanilla RNN (pytorch/examples style: embedding, nn.RNN, decoder), SGD
with momentum; `--lr-x 1000` is the learning rate 1000x too high."""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--lr-x", type=float, default=1.0)
args = ap.parse_args()
torch.manual_seed(0)
VOCAB, HIDDEN, BPTT = 30, 128, 35
g = torch.Generator().manual_seed(0)
# a text with structure to learn: each symbol tends to be followed by a few others
table = torch.randint(0, VOCAB, (VOCAB, 3), generator=g)
seq = [0]
for _ in range(20000):
    seq.append(int(table[seq[-1], int(torch.randint(0, 3, (1,), generator=g))]))
data = torch.tensor(seq)


class RNNModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Embedding(VOCAB, 64)
        self.rnn = nn.RNN(64, HIDDEN, batch_first=True)
        self.decoder = nn.Linear(HIDDEN, VOCAB)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.encoder(x))
        return self.decoder(out)


model = RNNModel()
opt = torch.optim.SGD(model.parameters(), lr=0.02 * args.lr_x, momentum=0.9)
for step in range(200):
    ix = torch.randint(0, len(data) - BPTT - 1, (20,))
    x = torch.stack([data[i : i + BPTT] for i in ix])
    y = torch.stack([data[i + 1 : i + 1 + BPTT] for i in ix])
    loss = F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 40 == 0:
        print(step, round(loss.item(), 4))
