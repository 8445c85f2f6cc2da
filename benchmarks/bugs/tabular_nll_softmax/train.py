"""Tabular classification with nll_loss on a model that ends in a softmax: nll_loss takes
log-probabilities, so the loss is minus the probability of the right class."""

import argparse

import torch
import torch.nn.functional as F
from data import load
from model import Classifier

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=300)
args = ap.parse_args()

torch.manual_seed(0)
x, y = load()
model = Classifier(16, 5)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for step in range(args.steps):
    i = torch.randint(0, len(x), (64,))
    probs = model(x[i])
    loss = F.nll_loss(probs, y[i])
    opt.zero_grad()
    loss.backward()
    opt.step()
acc = (model(x).argmax(1) == y).float().mean()
print(f"loss {loss.item():.4f} accuracy {acc:.3f}")
