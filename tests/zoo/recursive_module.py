"""A recursive network over a binary tree: the root module calls itself for each sub-tree
(nested calls of one module)."""
import torch
import torch.nn as nn

from _zoo import seed, watching


class TreeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.combine = nn.Linear(8, 4)
        self.leaf = nn.Linear(2, 4)

    def forward(self, tree):
        if isinstance(tree, torch.Tensor):
            return torch.tanh(self.leaf(tree))
        left, right = tree
        return torch.tanh(self.combine(torch.cat([self(left), self(right)], -1)))


def make(depth):
    if depth == 0:
        return torch.randn(1, 2)
    return (make(depth - 1), make(depth - 1))


seed(30)
model = TreeNet()
readout = nn.Linear(4, 1)
opt = torch.optim.Adam([*model.parameters(), *readout.parameters()], lr=1e-2)
with watching(model, opt):
    for step in range(20):
        tree = make(3)
        loss = (readout(model(tree)) - 0.5).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
print("loss", f"{loss.item():.4f}")
