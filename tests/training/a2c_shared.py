# A2C of our own: one network with a policy head and a value head, one optimizer, 16-step
# rollouts, loss = policy + 0.5 * value - ent_coef * entropy. --ent-coef sets the entropy
# bonus (a negative one rewards certainty: the policy's entropy collapses).
import argparse

import numpy as np
import torch
import torch.nn.functional as F
from _corridor import Corridor
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--ent-coef", type=float, default=0.01)
args = parser.parse_args()


class ActorCritic(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(9, 64), nn.ReLU())
        self.pi = nn.Linear(64, 2)
        self.v = nn.Linear(64, 1)

    def forward(self, x):
        h = self.body(x)
        return self.pi(h), self.v(h).squeeze(-1)


torch.manual_seed(2)
env = Corridor()
net = ActorCritic()
optimizer = torch.optim.RMSprop(net.parameters(), lr=2e-3)
obs, _ = env.reset(seed=2)
finished, ret = [], 0.0
for _update in range(400):
    log_probs, values, rewards, masks, entropies = [], [], [], [], []
    for _ in range(16):
        logits, value = net(torch.as_tensor(obs))
        probs = F.softmax(logits, -1)
        action = torch.multinomial(probs, 1).item()
        log_probs.append(F.log_softmax(logits, -1)[action])
        entropies.append(-(probs * F.log_softmax(logits, -1)).sum())
        values.append(value)
        obs, r, term, trunc, _ = env.step(action)
        ret += r
        rewards.append(r)
        masks.append(0.0 if term else 1.0)
        if term or trunc:
            finished.append(ret)
            ret = 0.0
            obs, _ = env.reset()
    with torch.no_grad():
        R = net(torch.as_tensor(obs))[1]
    returns = []
    for r, m in zip(reversed(rewards), reversed(masks)):
        R = r + 0.99 * R * m
        returns.insert(0, R)
    returns = torch.stack(returns)
    values = torch.stack(values)
    advantage = (returns - values).detach()
    actor_loss = -(torch.stack(log_probs) * advantage).mean()
    critic_loss = F.mse_loss(values, returns)
    loss = actor_loss + 0.5 * critic_loss - args.ent_coef * torch.stack(entropies).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print(
    f"episodes {len(finished)}: first 20 {np.mean(finished[:20]):.2f}, "
    f"last 20 {np.mean(finished[-20:]):.2f}"
)
