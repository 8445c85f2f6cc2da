"""A healthy character RNN trained one name a step (batch size 1, as in the PyTorch
"names" tutorial): each step's loss is one short sequence's, so it jumps between names.

    python char_rnn_batch1.py [--steps N]
"""

import argparse
import random

import torch
import torch.nn as nn

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=400)
args = ap.parse_args()
torch.manual_seed(0)
random.seed(0)

NAMES = [
    "emma",
    "olivia",
    "ava",
    "isabella",
    "sophia",
    "mia",
    "charlotte",
    "amelia",
    "harper",
    "evelyn",
    "abigail",
    "emily",
    "elizabeth",
    "mila",
    "ella",
    "avery",
    "sofia",
    "camila",
    "aria",
    "scarlett",
    "victoria",
    "madison",
    "luna",
    "grace",
    "chloe",
    "penelope",
    "layla",
    "riley",
    "zoey",
    "nora",
    "lily",
    "eleanor",
    "hannah",
    "lillian",
    "addison",
    "aubrey",
    "ellie",
    "stella",
    "natalie",
    "zoe",
    "leah",
    "hazel",
    "violet",
    "aurora",
    "savannah",
    "audrey",
    "brooklyn",
    "bella",
    "claire",
    "skylar",
    "lucy",
    "paisley",
    "everly",
    "anna",
    "caroline",
    "nova",
    "genesis",
    "emilia",
    "kennedy",
    "al",
    "bo",
]
CHARS = [*sorted(set("".join(NAMES))), "."]
IDX = {c: i for i, c in enumerate(CHARS)}


class RNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(len(CHARS), 24)
        self.rnn = nn.RNN(24, 64, batch_first=True)
        self.out = nn.Linear(64, len(CHARS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.rnn(self.emb(x))[0])


model = RNN()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(args.steps):
    name = random.choice(NAMES) + "."
    ids = torch.tensor([[IDX["."]] + [IDX[c] for c in name]])
    x, y = ids[:, :-1], ids[:, 1:]
    loss = nn.functional.cross_entropy(model(x).reshape(-1, len(CHARS)), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 100 == 0:
        print(f"step {step} loss {loss.item():.4f}")
