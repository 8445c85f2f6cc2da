"""A linear regression as a tutorial writes it: house prices (in thousands) against floor
area (in hundreds of square feet), ``nn.Linear(1, 1)``, plain SGD on the whole batch. The
targets are not normalised, so the first gradient is large beside the weight, and the loss
falls every step. Healthy.

    python linreg_prices.py [--epochs N]
"""

import argparse

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--epochs", type=int, default=200)
args = ap.parse_args()
torch.manual_seed(3)

area = torch.linspace(5.0, 40.0, 64).unsqueeze(1)
price = 12.0 * area + 40.0 + 15.0 * torch.randn(64, 1)

model = torch.nn.Linear(1, 1)
with torch.no_grad():
    model.weight.uniform_(-0.01, 0.01)  # a small random start, as some tutorials do
criterion = torch.nn.MSELoss()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
for epoch in range(args.epochs):
    prediction = model(area)
    loss = criterion(prediction, price)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if epoch % 50 == 0:
        print(f"epoch {epoch} loss {loss.item():.1f}")
print(f"price = {model.weight.item():.2f} * area + {model.bias.item():.2f}")
