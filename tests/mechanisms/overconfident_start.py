"""A bag-of-embeddings text classifier over 200 topics whose embedding and output layer are
initialised with std 1 (0.02 was meant): the logits start spread by tens, so the first loss
is far above chance (ln 200 = 5.3) and the model is confidently wrong. It then slowly falls.
``--std 0.02`` starts at chance.

    python overconfident_start.py [--steps N] [--std S]
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=300)
ap.add_argument("--std", type=float, default=1.0)
args = ap.parse_args()
torch.manual_seed(0)

VOCAB, TOPICS, DIM = 1000, 200, 64
topic_words = torch.randint(0, VOCAB, (TOPICS, 8))


class BagClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.EmbeddingBag(VOCAB, DIM, mode="sum")
        self.out = nn.Linear(DIM, TOPICS)
        for p in (self.embed.weight, self.out.weight):
            nn.init.normal_(p, std=args.std)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(self.embed(tokens))


model = BagClassifier()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(args.steps):
    topic = torch.randint(0, TOPICS, (64,))
    picks = torch.randint(0, 8, (64, 6))
    tokens = torch.gather(topic_words[topic], 1, picks)
    loss = F.cross_entropy(model(tokens), topic)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 50 == 0:
        print(f"step {step} loss {loss.item():.3f}")
