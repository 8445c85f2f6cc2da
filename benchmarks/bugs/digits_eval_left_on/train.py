"""A small CNN on synthetic digits. The validation helper switches the model to eval() and
nothing switches it back: every training step after the first validation runs with frozen,
never-learnt BatchNorm statistics."""

import argparse

import torch
import torch.nn.functional as F
from data import load
from model import make_cnn

ap = argparse.ArgumentParser()
ap.add_argument("--epochs", type=int, default=3)
ap.add_argument("--lr", type=float, default=0.05)
args = ap.parse_args()

torch.manual_seed(0)
images, labels = load()
train_x, train_y, val_x, val_y = images[:2500], labels[:2500], images[2500:], labels[2500:]
cnn = make_cnn()
opt = torch.optim.SGD(cnn.parameters(), lr=args.lr, momentum=0.9)


def validate(model):
    model.eval()
    with torch.no_grad():
        return (model(val_x).argmax(1) == val_y).float().mean().item()


print(f"accuracy before training {validate(cnn):.3f}")
for epoch in range(args.epochs):
    for b in range(0, 2500, 50):
        logits = cnn(train_x[b : b + 50])
        loss = F.cross_entropy(logits, train_y[b : b + 50])
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"epoch {epoch} loss {loss.item():.4f} val accuracy {validate(cnn):.3f}")
print(f"loss {loss.item():.4f}")
