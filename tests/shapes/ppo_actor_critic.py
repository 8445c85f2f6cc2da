"""A PPO-style agent with an actor and a critic, each with its own Adam, on a corridor whose
episodes lengthen as the agent learns to survive. The actor's clipped surrogate loss stays
near 0; the critic's squared error on the returns grows with the episodes. With
``--one-sample`` an update at step 40 is made from a batch of one transition, and the
advantage normalisation ``(a - a.mean()) / a.std()`` divides by the std of one value: NaN,
the actor's loss and gradients are NaN, and the program stops (exit 1). With
``--critic-by-hand`` the critic's squared error is written by hand, ``0.5 * (ret -
value).pow(2).mean()``, as many PPO implementations write it: the same critic.

    python ppo_actor_critic.py [--updates N] [--one-sample] [--critic-by-hand]
"""

import argparse
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical

ap = argparse.ArgumentParser()
ap.add_argument("--updates", type=int, default=120)
ap.add_argument("--one-sample", action="store_true")
ap.add_argument("--critic-by-hand", action="store_true")
args = ap.parse_args()
torch.manual_seed(0)

OBS = 12


class Agent:
    def __init__(self) -> None:
        self.actor = nn.Sequential(nn.Linear(OBS, 64), nn.Tanh(), nn.Linear(64, 2))
        self.critic = nn.Sequential(nn.Linear(OBS, 128), nn.ReLU(), nn.Linear(128, 1))
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=3e-3)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=1e-2)


def observe(pos: int) -> torch.Tensor:
    x = torch.zeros(OBS)
    x[pos % OBS] = 1.0
    return x


agent = Agent()
for update in range(args.updates):
    states, actions, rets, old_logps, lengths = [], [], [], [], []
    while len(states) < 64:  # whole episodes, 64 transitions at least
        rewards = []
        with torch.no_grad():
            for pos in range(80):
                s = observe(pos)
                dist = Categorical(logits=agent.actor(s))
                a = dist.sample()
                states.append(s)
                actions.append(a)
                old_logps.append(dist.log_prob(a))
                if int(a) != pos % 2:
                    rewards.append(0.0)
                    break
                rewards.append(1.0)
        g, episode = 0.0, []
        for r in reversed(rewards):
            g = r + 0.99 * g
            episode.insert(0, g)
        rets += episode
        lengths.append(len(rewards))
    n = 1 if (args.one_sample and update == 40) else len(states)
    s = torch.stack(states[:n])
    a = torch.stack(actions[:n])
    ret = torch.tensor(rets[:n])
    old = torch.stack(old_logps[:n])
    for _epoch in range(2):
        value = agent.critic(s).squeeze(-1)
        adv = ret - value.detach()
        adv = (adv - adv.mean()) / adv.std()
        dist = Categorical(logits=agent.actor(s))
        ratio = (dist.log_prob(a) - old).exp()
        actor_loss = -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean()
        agent.actor_opt.zero_grad()
        actor_loss.backward()
        agent.actor_opt.step()
        critic_loss = (
            0.5 * (ret - value).pow(2).mean() if args.critic_by_hand else F.mse_loss(value, ret)
        )
        agent.critic_opt.zero_grad()
        critic_loss.backward()
        agent.critic_opt.step()
    if not torch.isfinite(actor_loss):
        print(f"update {update}: actor loss is {actor_loss.item()}", file=sys.stderr)
        sys.exit(1)
    if update % 20 == 0:
        print(
            f"update {update} length {sum(lengths) / len(lengths):.1f} "
            f"actor {actor_loss.item():.4f} "
            f"critic {critic_loss.item():.2f}"
        )
