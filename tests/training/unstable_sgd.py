# A regression trained with SGD and momentum at a learning rate far past its limit
# (--lr 0.01 is healthy); the program logs its validation error with add_scalars.
import argparse
import tempfile

import torch
from torch import nn
from torch.utils.tensorboard import SummaryWriter

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.3)
args = parser.parse_args()

torch.manual_seed(7)
x = torch.randn(2048, 16) * 3
y = torch.sin(x[:, :4]).sum(1, keepdim=True) + 0.1 * x[:, 4:8].sum(1, keepdim=True)
model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
writer = SummaryWriter(tempfile.mkdtemp())
for epoch in range(40):
    for idx in torch.randperm(1536).split(64):
        loss = nn.functional.mse_loss(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        error = nn.functional.mse_loss(model(x[1536:]), y[1536:]).item()
    writer.add_scalars("regression", {"val_mse": error, "train_mse": loss.item()}, epoch)
writer.close()
print(f"validation mse {error:.4f}")
