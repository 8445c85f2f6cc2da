"""A corridor the agents of this folder learn to walk in a few hundred updates: a
gymnasium environment made directly (no ``gymnasium.make``), as hand-written RL code makes
its own. The agent starts in the middle; the observation is its place and which end pays
this episode. The paying end gives +1, the other -1, each step costs 0.05; an episode ends
at either end or after 15 steps. A random walk earns about 0; the best policy 0.9: it must
read which end pays."""

import gymnasium as gym
import numpy as np


class Corridor(gym.Env):
    def __init__(self, length=7, limit=15):
        self.length, self.limit = length, limit
        self.observation_space = gym.spaces.Box(0.0, 1.0, (length + 2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def _obs(self):
        obs = np.zeros(self.length + 2, np.float32)
        obs[self.at] = 1.0
        obs[self.length + self.goal] = 1.0
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.at, self.t = self.length // 2, 0
        self.goal = int(self.np_random.integers(2))
        return self._obs(), {}

    def step(self, action):
        self.at += 1 if action == 1 else -1
        self.t += 1
        end = self.at in (0, self.length - 1)
        reward = (1.0 if (self.at == 0) == (self.goal == 0) else -1.0) if end else -0.05
        return self._obs(), reward, end, self.t >= self.limit, {}
