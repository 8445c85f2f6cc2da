"""A character-level MLP written from raw tensors, the way the makemore lectures first write
it: an embedding table, a tanh layer, logits, the softmax written out (``counts =
logits.exp(); prob = counts / counts.sum(1, keepdims=True)``), ``loss = -prob[range(n),
Y].log().mean()``, and the update by hand (``p.data += -lr * p.grad``): no optimizer, no
library loss. Its output layer starts at the tutorial's first, unscaled ``torch.randn``: the
first loss is far above ln 27, confidently wrong. ``--scaled`` initialises it as the lecture
ends up doing (x0.01, bias 0), which starts at chance.

    python char_mlp_by_hand.py [--steps N] [--scaled]
"""

import argparse

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=300)
ap.add_argument("--scaled", action="store_true")
args = ap.parse_args()
g = torch.Generator().manual_seed(2147483647)

V, BLOCK = 27, 3
follow = torch.softmax(torch.randn(V, V, generator=g) * 3, 1)  # a Markov chain of "letters"
walk = [0]
for _ in range(20_000):
    walk.append(int(torch.multinomial(follow[walk[-1]], 1, generator=g)))
data = torch.tensor(walk)
X = torch.stack([data[i : i + BLOCK] for i in range(len(data) - BLOCK)])
Y = data[BLOCK:]

C = torch.randn((V, 10), generator=g)
W1 = torch.randn((BLOCK * 10, 200), generator=g) * (5 / 3) / (BLOCK * 10) ** 0.5
b1 = torch.randn(200, generator=g) * 0.01
W2 = torch.randn((200, V), generator=g) * (0.01 if args.scaled else 1.0)
b2 = torch.randn(V, generator=g) * (0.0 if args.scaled else 1.0)
parameters = [C, W1, b1, W2, b2]
for p in parameters:
    p.requires_grad = True

for i in range(args.steps):
    ix = torch.randint(0, X.shape[0], (32,), generator=g)
    emb = C[X[ix]]
    h = torch.tanh(emb.view(-1, BLOCK * 10) @ W1 + b1)
    logits = h @ W2 + b2
    counts = logits.exp()
    prob = counts / counts.sum(1, keepdims=True)
    loss = -prob[torch.arange(32), Y[ix]].log().mean()
    for p in parameters:
        p.grad = None
    loss.backward()
    lr = 0.1
    for p in parameters:
        p.data += -lr * p.grad
    if i % 50 == 0:
        print(f"{i:4d} loss {loss.item():.4f}")
