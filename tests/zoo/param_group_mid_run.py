"""A frozen backbone unfrozen at step 15 and added to the optimizer as a new param group
with its own learning rate."""
import torch
import torch.nn as nn

from _zoo import seed, watching

seed(15)
backbone = nn.Sequential(nn.Linear(5, 12), nn.ReLU())
head = nn.Linear(12, 1)
model = nn.Sequential(backbone, head)
for p in backbone.parameters():
    p.requires_grad_(False)
opt = torch.optim.Adam(head.parameters(), lr=1e-2)
with watching(model, opt):
    for step in range(30):
        if step == 15:
            for p in backbone.parameters():
                p.requires_grad_(True)
            opt.add_param_group({"params": list(backbone.parameters()), "lr": 1e-3})
            print("unfroze the backbone")
        x = torch.randn(32, 5)
        loss = (model(x) - x[:, :2].sum(1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
print("groups", len(opt.param_groups), "loss", f"{loss.item():.4f}")
