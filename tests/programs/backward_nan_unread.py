# a model whose backward turns NaN at one step (sqrt at 0: its gradient is inf, times 0 is
# NaN) while the loss stays finite: run with --grads-every 5, that step's gradients are
# not read at their step
import torch
import torch.nn as nn

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(6, 12), nn.Linear(12, 1)

    def forward(self, x: torch.Tensor, step: int) -> torch.Tensor:
        h = torch.relu(self.a(x))
        spread = h.pow(2).mean(1, keepdim=True) * (0.0 if step == 33 else 1.0)
        return self.b(h) + 0.0 * torch.sqrt(spread)  # sqrt(0): an infinite gradient


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(16, 6), torch.randn(16, 1)
for step in range(60):
    loss = ((model(x, step) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
