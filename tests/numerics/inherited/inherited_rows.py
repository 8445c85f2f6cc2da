"""A regression over a table whose later rows carry missing values read as NaN."""

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(21)
table = torch.randn(512, 7)
table[300:305, 4] = float("nan")  # a column with gaps, as a CSV reader leaves them
target = table[:, :1].nan_to_num() * 2
loader = DataLoader(TensorDataset(table, target), batch_size=32)
model = nn.Sequential(nn.Linear(7, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for features, y in loader:
    loss = nn.functional.mse_loss(model(features), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final {loss.item():.4f}")
