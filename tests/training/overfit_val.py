# A classifier memorising 64 examples with labels that are half noise; the program logs its
# validation loss and accuracy to TensorBoard each epoch. Training loss falls to ~0 while the
# validation loss climbs: overfitting. --weight-decay and --epochs make a healthy run.
import argparse
import tempfile

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.tensorboard import SummaryWriter

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=300)
args = parser.parse_args()

torch.manual_seed(6)
w_true = torch.randn(20, 3)


def data(n, noise):
    x = torch.randn(n, 20)
    y = (x @ w_true).argmax(1)
    flip = torch.rand(n) < noise
    return x, torch.where(flip, torch.randint(0, 3, (n,)), y)


x_train, y_train = data(64, 0.5)
x_val, y_val = data(512, 0.0)
model = nn.Sequential(
    nn.Linear(20, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 3)
)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
writer = SummaryWriter(tempfile.mkdtemp())
for epoch in range(args.epochs):
    for idx in torch.randperm(64).split(16):
        loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        logits = model(x_val)
        writer.add_scalar("val/loss", F.cross_entropy(logits, y_val).item(), epoch)
        writer.add_scalar("val/accuracy", (logits.argmax(1) == y_val).float().mean().item(), epoch)
writer.close()
print(f"train loss {loss.item():.4f}, val loss {F.cross_entropy(logits, y_val).item():.3f}")
