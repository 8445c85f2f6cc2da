# stable-baselines3's DQN on the corridor, its logger at its defaults (no file output).
from _corridor import Corridor
from stable_baselines3 import DQN
from stable_baselines3.common.evaluation import evaluate_policy

model = DQN(
    "MlpPolicy",
    Corridor(),
    learning_rate=1e-3,
    buffer_size=5000,
    learning_starts=200,
    batch_size=64,
    gamma=0.95,
    target_update_interval=50,
    train_freq=1,
    exploration_fraction=0.35,
    policy_kwargs={"net_arch": [32]},
    seed=3,
    verbose=0,
)
model.learn(total_timesteps=2000, log_interval=10)
mean, std = evaluate_policy(model, Corridor(), n_eval_episodes=20)
print(f"evaluation: {mean:.2f} +- {std:.2f}")
