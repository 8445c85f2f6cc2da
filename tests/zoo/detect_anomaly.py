"""The program turns on autograd's anomaly mode itself for its first steps, then off."""
import warnings

import torch
import torch.nn as nn

from _zoo import seed, watching

warnings.filterwarnings("ignore", message="Anomaly Detection has been enabled")
seed(37)
model = nn.Sequential(nn.Linear(3, 6), nn.Tanh(), nn.Linear(6, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
torch.autograd.set_detect_anomaly(True)
with watching(model, opt):
    for step in range(20):
        if step == 10:
            torch.autograd.set_detect_anomaly(False)
        x = torch.randn(8, 3)
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
print("anomaly mode:", torch.is_anomaly_enabled(), "loss", f"{loss.item():.4f}")
