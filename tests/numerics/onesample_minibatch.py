"""A value regression whose targets are standardised per minibatch; 33 samples in minibatches
of 8 leave one alone at the end of each epoch."""

import torch

torch.manual_seed(21)
value = torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(value.parameters(), lr=0.05)
states, returns = torch.randn(33, 3), torch.randn(33) * 4 + 2
for epoch in range(3):
    for i in range(0, 33, 8):
        s, g = states[i : i + 8], returns[i : i + 8]
        target = (g - g.mean()) / g.std()
        loss = ((value(s).squeeze(-1) - target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
print(f"final {loss.item():.3f}")
