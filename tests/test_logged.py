"""The program's own measures, read where it logs them (``collect.attach.logged``, issue 59).

Each program below logs through a real library (TensorBoard, Lightning, the Hugging Face
``Trainer``, W&B offline, MLflow's local store, stable-baselines3, a gymnasium environment)
and runs unchanged under ``gradoc run``; its numbers must be in the run log under the names
it gave them, once (a framework's own TensorBoard writes are not counted twice), and the
program must run as it does without gradoc.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

import gradoc
from gradoc.collect.attach import logged
from gradoc.detect.measures import direction, measures
from tests.test_cli import gradoc_cli


def _run(tmp_path: Path, source: str, **env: str) -> gradoc.RunLog:
    (tmp_path / "prog.py").write_text(textwrap.dedent(source))
    done = gradoc_cli("run", "--out", "run", "prog.py", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "program done" in done.stdout  # it ran to its end, printing as it does alone
    return gradoc.open_run(tmp_path / "run")


def test_tensorboard_scalars_and_a_gym_environments_episodes(tmp_path: Path) -> None:
    log = _run(
        tmp_path,
        """\
        import gymnasium as gym
        import torch
        from torch.utils.tensorboard import SummaryWriter

        env = gym.make("CartPole-v1")
        env.reset(seed=0)
        writer = SummaryWriter("tb")
        net = torch.nn.Linear(4, 2)
        opt = torch.optim.SGD(net.parameters(), lr=0.01)
        returns, total = [], 0.0
        for step in range(12):
            for _ in range(25):
                _, reward, term, trunc, _ = env.step(step % 2)
                total += reward
                if term or trunc:
                    returns.append(total)
                    total = 0.0
                    env.reset()
            loss = net(torch.randn(8, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            writer.add_scalar("train/loss", loss.detach(), step)
            writer.add_scalars("val", {"acc": step / 10}, step)
        writer.close()
        with open("returns.txt", "w") as f:
            f.write(" ".join(map(str, returns)))
        print("program done")
        """,
    )
    assert log.metrics() == {
        "episode/return": "gym",
        "episode/length": "gym",
        "train/loss": "tensorboard",
        "val/acc": "tensorboard",
    }
    returns = [float(v) for v in (tmp_path / "returns.txt").read_text().split()]
    assert log.metric("episode/return").values == returns  # the program's own count
    assert log.metric("episode/length").values == returns  # CartPole: 1 a step
    loss = log.metric("train/loss")
    assert len(loss) == 12 and loss.values == pytest.approx(log.scalar("loss").values, rel=1e-6)
    assert log.metric("val/acc").values == pytest.approx([s / 10 for s in range(12)])

    # the report: report.json's run.metrics, the terminal, the HTML page
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    said = {m["name"]: m for m in report["run"]["metrics"]}
    assert said["episode/return"]["direction"] == "up"
    assert said["episode/return"]["best"] == max(returns)
    assert said["train/loss"]["direction"] == "down"
    assert said["episode/length"]["direction"] is None  # CartPole's is up, MountainCar's down
    shown = gradoc_cli("report", "run", "--html", "r.html", cwd=tmp_path, env={"COLUMNS": "200"})
    assert "the program's own measures (read from gym, tensorboard)" in shown.stdout
    assert "higher is better: the name (return)" in shown.stdout
    page = (tmp_path / "r.html").read_text()
    assert "chart-measure-0" in page and "episode/return" in page


def test_lightning_logs_are_read_once_at_lightning(tmp_path: Path) -> None:
    log = _run(
        tmp_path,
        """\
        import lightning as L
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        class Net(L.LightningModule):
            def __init__(self):
                super().__init__()
                self.layer = torch.nn.Linear(3, 1)

            def training_step(self, batch, i):
                x, y = batch
                loss = torch.nn.functional.mse_loss(self.layer(x), y)
                self.log("train_loss", loss)
                return loss

            def validation_step(self, batch, i):
                x, y = batch
                self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        torch.manual_seed(0)
        x = torch.randn(64, 3)
        data = TensorDataset(x, x.sum(1, keepdim=True))
        stop = L.pytorch.callbacks.EarlyStopping(monitor="val_loss", mode="min", patience=5)
        trainer = L.Trainer(max_epochs=3, log_every_n_steps=1, enable_progress_bar=False,
                            enable_model_summary=False, enable_checkpointing=False,
                            callbacks=[stop])
        trainer.fit(Net(), DataLoader(data, batch_size=16), DataLoader(data, batch_size=64))
        print("program done")
        """,
    )
    names = log.metrics()
    assert names.get("train_loss") == "lightning" and names.get("val_loss") == "lightning"
    assert "tensorboard" not in names.values()  # its TensorBoard logger's writes are Lightning's
    assert len(log.metric("train_loss")) == 12 and len(log.metric("val_loss")) == 3
    val = log.metric("val_loss").values
    assert val[-1] < val[0]
    declared = log.meta.logged["declared"]["val_loss"]
    assert declared == {
        "direction": "down",
        "from": "EarlyStopping(monitor='val_loss', mode='min')",
    }


def test_the_hugging_face_trainers_logs(tmp_path: Path) -> None:
    log = _run(
        tmp_path,
        """\
        import torch
        from transformers import Trainer, TrainingArguments

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.layer = torch.nn.Linear(3, 1)

            def forward(self, x, labels=None):
                out = self.layer(x)
                return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}

        torch.manual_seed(0)
        x = torch.randn(64, 3)
        rows = [{"x": a, "labels": a.sum(0, keepdim=True)} for a in x]
        args = TrainingArguments("out", num_train_epochs=2, per_device_train_batch_size=16,
                                 logging_steps=2, eval_strategy="epoch", report_to=["tensorboard"],
                                 save_strategy="no", use_cpu=True, disable_tqdm=True,
                                 metric_for_best_model="loss")
        Trainer(Net(), args, train_dataset=rows, eval_dataset=rows).train()
        print("program done")
        """,
    )
    names = log.metrics()
    assert names.get("loss") == "hf" and names.get("eval_loss") == "hf"
    assert "tensorboard" not in names.values()  # the report_to callback's writes are the Trainer's
    assert len(log.metric("loss")) == 4 and len(log.metric("eval_loss")) == 2
    declared = log.meta.logged["declared"]["eval_loss"]
    assert declared["direction"] == "down" and "greater_is_better=False" in declared["from"]


@pytest.mark.parametrize(
    ("name", "way"),
    [
        ("rollout/ep_rew_mean", "up"),
        ("val_acc", "up"),
        ("eval/accuracy", "up"),
        ("valBleu", "up"),
        ("val_loss", "down"),
        ("train/perplexity", "down"),
        ("test_mse", "down"),
        ("episode/length", None),
        ("train/approx_kl", None),
        ("loss_of_accuracy", None),  # both: neither is assumed
    ],
)
def test_a_measures_direction_from_its_name(name: str, way: str | None) -> None:
    assert direction(name)[0] == way


def test_a_direction_the_program_declares_wins_and_bookkeeping_is_no_measure() -> None:
    declared = {"score": {"direction": "down", "from": "ModelCheckpoint(mode='min')"}}
    assert direction("score", declared) == ("down", "ModelCheckpoint(mode='min')")
    logged_ = {
        "epoch": ("lightning", gradoc.store.Series([0], [0.0])),
        "time/fps": ("sb3", gradoc.store.Series([0], [900.0])),
        "hp_metric": ("tensorboard", gradoc.store.Series([0], [-1.0])),  # Lightning's placeholder
        "val_acc": ("lightning", gradoc.store.Series([0, 1], [0.5, 0.7])),
    }
    assert [m.name for m in measures(logged_)] == ["val_acc"]


def test_wandb_offline_and_mlflows_local_store(tmp_path: Path) -> None:
    log = _run(
        tmp_path,
        """\
        import mlflow
        import torch
        import wandb

        mlflow.set_tracking_uri("file:" + __import__("os").path.abspath("mlruns"))
        run = wandb.init(project="p", dir=".", mode="offline")
        net = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        with mlflow.start_run():
            for step in range(5):
                loss = net(torch.randn(4, 2)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                wandb.log({"reward": float(step), "eval": {"acc": 0.1 * step}, "note": "text"})
                mlflow.log_metric("val_acc", 0.2 * step, step=step)
                mlflow.log_metrics({"val_loss": 1.0 / (step + 1)}, step=step)
        run.finish()
        print("program done")
        """,
        WANDB_SILENT="true",
        MLFLOW_ALLOW_FILE_STORE="true",
    )
    assert log.metrics() == {
        "reward": "wandb",
        "eval/acc": "wandb",
        "val_acc": "mlflow",
        "val_loss": "mlflow",
    }
    assert log.metric("reward").values == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert log.metric("val_loss").values == pytest.approx([1, 1 / 2, 1 / 3, 1 / 4, 1 / 5])


def test_stable_baselines3s_logger(tmp_path: Path) -> None:
    log = _run(
        tmp_path,
        """\
        from stable_baselines3 import PPO

        model = PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=32, n_epochs=1, seed=0,
                    verbose=0)
        model.learn(total_timesteps=256)
        print("program done")
        """,
    )
    names = log.metrics()
    assert names.get("rollout/ep_rew_mean") == "sb3", names
    assert names.get("train/value_loss") == "sb3"
    assert log.metric("rollout/ep_rew_mean").values  # episodes ended: their mean was logged
    assert names.get("episode/return") == "gym"  # the environment SB3 made, read too


def test_an_environment_the_program_makes_itself_is_read_from_its_first_reset(
    tmp_path: Path,
) -> None:
    import gymnasium as gym

    class Walk(gym.Env[int, int]):  # three steps an episode, one reward each
        observation_space = gym.spaces.Discrete(4)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[int, dict]:
            super().reset(seed=seed)
            self.t = 0
            return 0, {}

        def step(self, action: int) -> tuple[int, float, bool, bool, dict]:
            self.t += 1
            return self.t, float(action + 1), self.t == 3, False, {}

    with gradoc.watch(torch.nn.Linear(2, 1), out=tmp_path / "run"):
        env = Walk()  # no gymnasium.make: watched from its first reset
        env.reset(seed=0)
        for episode in range(4):
            for _ in range(3):
                env.step(episode % 2)
            env.reset()
        wrapped = gym.wrappers.TimeLimit(Walk(), max_episode_steps=2)
        wrapped.reset()  # the program's own wrapper: the inner env is read, once
        for _ in range(2):
            wrapped.step(0)
    log = gradoc.open_run(tmp_path / "run")
    assert log.metric("episode/return").values == [3.0, 6.0, 3.0, 6.0]
    assert log.metric("episode/length").values == [3, 3, 3, 3]


def test_nothing_is_wrapped_once_the_run_closes(tmp_path: Path) -> None:
    import gymnasium as gym
    from torch.utils.tensorboard import SummaryWriter

    plain, reset = SummaryWriter.add_scalar, gym.Env.reset
    with gradoc.watch(torch.nn.Linear(2, 1), out=tmp_path / "run"):
        assert SummaryWriter.add_scalar is not plain
        assert gym.Env.reset is not reset
        env = gym.make("CartPole-v1")
        assert type(env).step.__name__ == "step"
    assert SummaryWriter.add_scalar is plain
    assert gym.Env.reset is reset
    assert not any(isinstance(f, logged._AfterImport) for f in __import__("sys").meta_path)
