"""A tree of nodes whose sub-trees are a plain list `self.children` (shadows
nn.Module.children()); each node registers its sub-trees as modules under another name."""
import torch
import torch.nn as nn

from _zoo import seed, watching


class Node(nn.Module):
    def __init__(self, depth):
        super().__init__()
        self.mix = nn.Linear(4, 4)
        kids = [Node(depth - 1) for _ in range(2)] if depth else []
        self.kids = nn.ModuleList(kids)
        self.children = list(kids)

    def forward(self, x):
        x = torch.tanh(self.mix(x))
        for child in self.children:
            x = x + 0.5 * child(x)
        return x


seed(3)
tree = Node(2)
opt = torch.optim.Adam(nn.Module.parameters(tree), lr=3e-3)
with watching(tree, opt):
    for step in range(30):
        x = torch.randn(16, 4)
        loss = (tree(x) - x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
print("loss", f"{loss.item():.4f}", "children", len(tree.children))
