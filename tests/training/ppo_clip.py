# PPO of our own: an actor and a critic with optimizers of their own, rollouts of 256 steps,
# GAE, four epochs of minibatches over the clipped probability ratio. --grad-clip sets
# clip_grad_norm_'s max_norm for both (0 zeroes every gradient).
import argparse

import numpy as np
import torch
from _corridor import Corridor
from torch import nn
from torch.distributions import Categorical

parser = argparse.ArgumentParser()
parser.add_argument("--grad-clip", type=float, default=0.5)
args = parser.parse_args()

torch.manual_seed(1)
env = Corridor()
actor = nn.Sequential(nn.Linear(9, 64), nn.Tanh(), nn.Linear(64, 2))
critic = nn.Sequential(nn.Linear(9, 64), nn.Tanh(), nn.Linear(64, 1))
actor_opt = torch.optim.Adam(actor.parameters(), lr=3e-3)
critic_opt = torch.optim.Adam(critic.parameters(), lr=3e-3)
obs, _ = env.reset(seed=1)
episode_returns, running = [], 0.0
for _iteration in range(25):
    states, actions, logps, rewards, dones, values = [], [], [], [], [], []
    for _ in range(256):
        s = torch.as_tensor(obs)
        with torch.no_grad():
            dist = Categorical(logits=actor(s))
            a = dist.sample()
            values.append(critic(s).item())
        obs, r, term, trunc, _ = env.step(int(a))
        states.append(s)
        actions.append(a)
        logps.append(dist.log_prob(a))
        rewards.append(r)
        dones.append(term or trunc)
        running += r
        if term or trunc:
            episode_returns.append(running)
            running = 0.0
            obs, _ = env.reset()
    with torch.no_grad():
        last = critic(torch.as_tensor(obs)).item()
    adv, gae = np.zeros(256, np.float32), 0.0
    for t in reversed(range(256)):
        nxt = last if t == 255 else values[t + 1]
        mask = 0.0 if dones[t] else 1.0
        delta = rewards[t] + 0.99 * nxt * mask - values[t]
        gae = delta + 0.99 * 0.95 * mask * gae
        adv[t] = gae
    S, A, old = torch.stack(states), torch.stack(actions), torch.stack(logps)
    advantages = torch.as_tensor(adv)
    targets = advantages + torch.as_tensor(values, dtype=torch.float32)
    for _epoch in range(4):
        for idx in torch.randperm(256).split(64):
            a_hat = (advantages[idx] - advantages[idx].mean()) / (advantages[idx].std() + 1e-8)
            new = Categorical(logits=actor(S[idx]))
            ratio = torch.exp(new.log_prob(A[idx]) - old[idx])
            clipped = torch.clamp(ratio, 0.8, 1.2)
            policy_loss = -torch.min(ratio * a_hat, clipped * a_hat).mean()
            policy_loss = policy_loss - 0.01 * new.entropy().mean()
            actor_opt.zero_grad()
            policy_loss.backward()
            nn.utils.clip_grad_norm_(actor.parameters(), args.grad_clip)
            actor_opt.step()
            value_loss = ((critic(S[idx]).squeeze(-1) - targets[idx]) ** 2).mean()
            critic_opt.zero_grad()
            value_loss.backward()
            nn.utils.clip_grad_norm_(critic.parameters(), args.grad_clip)
            critic_opt.step()
print(
    f"episodes {len(episode_returns)}: first 20 {np.mean(episode_returns[:20]):.2f}, "
    f"last 20 {np.mean(episode_returns[-20:]):.2f}"
)
