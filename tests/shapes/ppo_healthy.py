"""A healthy policy-gradient agent on a corridor whose episodes lengthen as it learns to
survive: the return-weighted loss grows with the episode length while the agent gets
better (the loss of a policy gradient is no measure of progress).

    python ppo_healthy.py [--updates N]
"""

import argparse

import torch
import torch.nn as nn
from torch.distributions import Categorical

ap = argparse.ArgumentParser()
ap.add_argument("--updates", type=int, default=150)
args = ap.parse_args()
torch.manual_seed(0)

OBS = 12
policy = nn.Sequential(nn.Linear(OBS, 32), nn.Tanh(), nn.Linear(32, 2))
opt = torch.optim.Adam(policy.parameters(), lr=1e-2)


def observe(pos: int) -> torch.Tensor:
    x = torch.zeros(OBS)
    x[pos % OBS] = 1.0
    return x


for update in range(args.updates):
    logps, rewards = [], []
    for pos in range(60):  # survive: step left (0) at even positions, right (1) at odd ones
        dist = Categorical(logits=policy(observe(pos)))
        a = dist.sample()
        logps.append(dist.log_prob(a))
        if int(a) != pos % 2:
            rewards.append(0.0)
            break
        rewards.append(1.0)
    rets, g = [], 0.0
    for r in reversed(rewards):
        g = r + 0.99 * g
        rets.insert(0, g)
    loss = -(torch.stack(logps) * torch.tensor(rets)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if update % 30 == 0:
        print(f"update {update} length {len(rewards)} loss {loss.item():.3f}")
