"""`self.state_dict` holds the model's own bookkeeping (a dict); the checkpoint is written
with nn.Module.state_dict(model), and loaded back."""
import torch
import torch.nn as nn

from _zoo import seed, watching


class Tracked(nn.Module):
    def __init__(self):
        super().__init__()
        self.state_dict = {"epochs": 0}
        self.fc = nn.Linear(6, 2)

    def forward(self, x):
        return self.fc(x)


seed(6)
model = Tracked()
opt = torch.optim.Adam(nn.Module.parameters(model), lr=1e-2)
with watching(model, opt):
    for epoch in range(3):
        for step in range(10):
            x = torch.randn(16, 6)
            loss = nn.functional.cross_entropy(model(x), (x[:, 0] > 0).long())
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.state_dict["epochs"] += 1
        torch.save(nn.Module.state_dict(model), f"ckpt{epoch}.pt")
        print("epoch", epoch, f"{loss.item():.4f}")
again = Tracked()
nn.Module.load_state_dict(again, torch.load("ckpt2.pt"))
print("reloaded equal:", torch.equal(again.fc.weight, model.fc.weight), model.state_dict)
