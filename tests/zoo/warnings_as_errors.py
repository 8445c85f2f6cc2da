"""`warnings.simplefilter("error")`: any warning anything raises in the process is an
exception. The program itself raises none."""
import warnings

warnings.simplefilter("error")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

from _zoo import seed, watching  # noqa: E402

seed(25)
model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
with watching(model, opt):
    for step in range(30):
        x = torch.randn(16, 4)
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
print("loss", f"{loss.detach().item():.4f}", "lr", sched.get_last_lr())
