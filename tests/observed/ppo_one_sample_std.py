"""A small PPO agent on a corridor task (walk right to the goal) whose advantage
normalisation divides by ``adv.std()``. The last minibatch of an epoch holds one sample
when the rollout length leaves a remainder of one: the std of one sample is NaN (an
unbiased estimate needs two), so the loss, the gradients and then the weights are NaN,
and the next rollout's ``Categorical`` refuses NaN logits: exit 1 under python.

    python ppo_one_sample_std.py [--updates N]
"""

import argparse

import torch
import torch.nn as nn
from torch.distributions import Categorical

ap = argparse.ArgumentParser()
ap.add_argument("--updates", type=int, default=12)
args = ap.parse_args()
torch.manual_seed(3)

GOAL, OBS = 8, 10


def observe(pos: int) -> torch.Tensor:
    x = torch.zeros(OBS)
    x[min(pos, OBS - 1)] = 1.0
    return x


class Policy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(OBS, 32), nn.Tanh())
        self.pi, self.v = nn.Linear(32, 2), nn.Linear(32, 1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.body(obs)
        return self.pi(h), self.v(h).squeeze(-1)


agent = Policy()
opt = torch.optim.Adam(agent.parameters(), lr=3e-3)
for update in range(args.updates):
    obs, acts, logps, rets = [], [], [], []
    steps = 24 + update  # rollout length grows: 25 leaves one sample in the last minibatch
    pos, rewards = 0, []
    with torch.no_grad():
        for _ in range(steps):
            o = observe(pos)
            logits, _ = agent(o)
            dist = Categorical(logits=logits)
            a = dist.sample()
            obs.append(o), acts.append(a), logps.append(dist.log_prob(a))
            pos = max(0, pos + (1 if a.item() == 1 else -1))
            rewards.append(1.0 if pos >= GOAL else -0.01)
            if pos >= GOAL:
                pos = 0
    g, out = 0.0, []
    for r in reversed(rewards):
        g = r + 0.9 * g
        out.append(g)
    rets = torch.tensor(out[::-1])
    obs_t, acts_t, old = torch.stack(obs), torch.stack(acts), torch.stack(logps)
    for start in range(0, steps, 8):
        sl = slice(start, start + 8)
        logits, values = agent(obs_t[sl])
        dist = Categorical(logits=logits)
        adv = rets[sl] - values.detach()
        adv = (adv - adv.mean()) / adv.std()  # one sample: std() is NaN
        ratio = torch.exp(dist.log_prob(acts_t[sl]) - old[sl])
        clipped = torch.clamp(ratio, 0.8, 1.2) * adv
        loss = -torch.min(ratio * adv, clipped).mean() + 0.5 * (rets[sl] - values).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"update {update}: return {sum(rewards):.2f} loss {loss.item():.4f}")
