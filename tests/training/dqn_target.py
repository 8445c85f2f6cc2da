# A DQN of our own: a replay buffer, an epsilon-greedy policy, a target network refreshed
# every 50 updates, the TD error by Huber loss. --lr-scale multiplies the learning rate.
import argparse
import random
from collections import deque

import numpy as np
import torch
from _corridor import Corridor
from torch import nn
from torch.nn import functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--lr-scale", type=float, default=1.0)
args = parser.parse_args()

random.seed(0)
torch.manual_seed(0)
env = Corridor()
online = nn.Sequential(nn.Linear(9, 32), nn.ReLU(), nn.Linear(32, 2))
target = nn.Sequential(nn.Linear(9, 32), nn.ReLU(), nn.Linear(32, 2))
target.load_state_dict(online.state_dict())
opt = torch.optim.Adam(online.parameters(), lr=1e-3 * args.lr_scale)
memory = deque(maxlen=5000)
obs, _ = env.reset(seed=0)
returns, ret = [], 0.0
for t in range(2000):
    eps = max(0.05, 1.0 - t / 700)
    if random.random() < eps:
        action = random.randrange(2)
    else:
        with torch.no_grad():
            action = int(online(torch.as_tensor(obs)).argmax())
    nxt, reward, term, trunc, _ = env.step(action)
    memory.append((obs, action, reward, nxt, float(term)))
    ret += reward
    obs = nxt
    if term or trunc:
        returns.append(ret)
        obs, ret = env.reset()[0], 0.0
    if len(memory) < 200:
        continue
    batch = random.sample(memory, 64)
    s, a, r, s2, d = (torch.as_tensor(np.array(x), dtype=torch.float32) for x in zip(*batch))
    with torch.no_grad():
        y = r + 0.95 * (1 - d) * target(s2).max(1).values
    q = online(s).gather(1, a.long().unsqueeze(1)).squeeze(1)
    loss = F.smooth_l1_loss(q, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if t % 50 == 0:
        target.load_state_dict(online.state_dict())
print(
    f"episodes {len(returns)}, first 20 {np.mean(returns[:20]):.2f}, "
    f"last 20 {np.mean(returns[-20:]):.2f}"
)
