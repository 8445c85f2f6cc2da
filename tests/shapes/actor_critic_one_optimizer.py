"""A healthy one-step actor-critic with one network, two heads and one Adam: its loss is the
policy term plus the value term, ``-(log_prob * advantage) + 0.5 * (return - value)**2``,
on a noisy corridor whose episodes lengthen (and whose returns grow) as the agent learns to
survive. The loss grows with the returns while the agent gets better: a reinforcement
objective, not one that should fall. ``--seed`` changes the episodes. ``--lr 0.3`` (x100)
collapses the policy: within a few updates one action is certain in every state, the
episodes end at the first or second position, and its gradient is gone.

    python actor_critic_one_optimizer.py [--updates N] [--seed S] [--lr LR]
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical

ap = argparse.ArgumentParser()
ap.add_argument("--updates", type=int, default=200)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--lr", type=float, default=3e-3)
args = ap.parse_args()
torch.manual_seed(args.seed)

OBS = 12


class ActorCritic(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(OBS, 64), nn.ReLU())
        self.policy = nn.Linear(64, 2)
        self.value = nn.Linear(64, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.body(x)
        return self.policy(h), self.value(h).squeeze(-1)


def observe(pos: int) -> torch.Tensor:
    x = 0.1 * torch.randn(OBS)
    x[pos % OBS] += 1.0
    return x


net = ActorCritic()
opt = torch.optim.Adam(net.parameters(), lr=args.lr)
for update in range(args.updates):
    logps, values, rewards = [], [], []
    for pos in range(100):  # survive: step left (0) at even positions, right (1) at odd ones
        logits, value = net(observe(pos))
        dist = Categorical(logits=logits)
        a = dist.sample()
        logps.append(dist.log_prob(a))
        values.append(value)
        if int(a) != pos % 2:
            rewards.append(0.0)
            break
        rewards.append(1.0)
    rets, g = [], 0.0
    for r in reversed(rewards):
        g = r + 0.99 * g
        rets.insert(0, g)
    ret, value = torch.tensor(rets), torch.stack(values)
    advantage = ret - value.detach()
    loss = -(torch.stack(logps) * advantage).mean() + 0.5 * F.mse_loss(value, ret)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if update % 40 == 0:
        print(f"update {update} length {len(rewards)} loss {loss.item():.3f}")
