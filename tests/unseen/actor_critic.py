"""A healthy actor-critic (pytorch/examples reinforcement_learning style) on a small
balancing task: the loss is summed over each episode, and episodes grow longer as the
policy learns, so the loss grows with them."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class Policy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.affine = nn.Linear(2, 64)
        self.action_head = nn.Linear(64, 2)
        self.value_head = nn.Linear(64, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = F.relu(self.affine(x))
        return F.softmax(self.action_head(h), dim=-1), self.value_head(h)


model = Policy()
opt = torch.optim.Adam(model.parameters(), lr=3e-2)
gamma = 0.99
lengths = []
for episode in range(80):
    pos, vel = torch.zeros(1), torch.zeros(1)
    log_probs, values, rewards = [], [], []
    for _ in range(100):
        state = torch.cat([pos, vel])
        probs, value = model(state)
        action = torch.multinomial(probs, 1)
        log_probs.append(torch.log(probs[action]))
        values.append(value)
        vel = vel + 0.1 * (action.float() * 2 - 1) + 0.05 * torch.randn(1)
        pos = pos + 0.1 * vel
        rewards.append(1.0)
        if pos.abs() > 1.0:
            break
    returns, r = [], 0.0
    for reward in reversed(rewards):
        r = reward + gamma * r
        returns.insert(0, r)
    ret = torch.tensor(returns)
    ret = (ret - ret.mean()) / (ret.std() + 1e-6) if len(ret) > 1 else ret * 0
    loss = torch.zeros(())
    for lp, v, R in zip(log_probs, values, ret):
        advantage = R - v.item()
        loss = loss + (-lp * advantage).sum() + F.smooth_l1_loss(v, R.reshape(1))  # summed
    opt.zero_grad()
    loss.backward()
    opt.step()
    lengths.append(len(rewards))
    if episode % 20 == 0:
        print(episode, len(rewards), round(loss.item(), 3))
print("mean length, first / last 20 episodes:", sum(lengths[:20]) / 20, sum(lengths[-20:]) / 20)
