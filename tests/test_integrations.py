"""Lightning and Hugging Face callbacks, with the real libraries on the CPU."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import gradoc
from tests.models import tiny_bert_config


def test_lightning_callback_records_the_real_gradients(tmp_path: Path) -> None:
    pl = pytest.importorskip("lightning.pytorch")
    from gradoc.integrations.lightning import GradocCallback

    seen: list[tuple[float, float]] = []  # (loss, grad norm) as the module saw them

    class Module(pl.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], i: int) -> torch.Tensor:
            x, y = batch
            loss = F.mse_loss(self.net(x), y)
            self._loss = float(loss)
            return loss

        def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
            grads = [p.grad for p in self.parameters() if p.grad is not None]
            seen.append((self._loss, float(torch.nn.utils.get_total_norm(grads))))

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.05)

    g = torch.Generator().manual_seed(0)
    x = torch.randn(160, 8, generator=g)
    data = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=16
    )
    callback = GradocCallback(out=tmp_path / "run")
    trainer = pl.Trainer(
        max_epochs=2,
        callbacks=[callback],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(Module(), data)
    log = gradoc.open_run(tmp_path / "run")
    assert log.num_steps == 20 and (tmp_path / "run" / "report.json").exists()
    assert log.scalar("loss").values == pytest.approx([s[0] for s in seen], rel=1e-5)
    assert log.scalar("grad_norm").values == pytest.approx([s[1] for s in seen], rel=1e-4)


def test_hugging_face_callback_with_a_model_built_from_a_config(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    from gradoc.integrations.hf import GradocCallback

    config = tiny_bert_config(num_labels=2)
    model = transformers.BertForSequenceClassification(config)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 50, (64, 12), generator=g)
    rows = [{"input_ids": i, "labels": int(i[0] % 2)} for i in ids]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf"),
        per_device_train_batch_size=8,
        num_train_epochs=1,
        report_to=[],
        logging_strategy="no",
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(
        model=model,
        args=args,
        train_dataset=rows,
        callbacks=[GradocCallback(out=tmp_path / "run")],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    log = gradoc.open_run(tmp_path / "run")
    assert log.num_steps == 8 and (tmp_path / "run" / "report.json").exists()
    losses = log.scalar("loss").values
    assert len(losses) == 8 and all(0 < v < 5 for v in losses)
    names = {p.name for p in log.params}
    assert "bert.encoder.layer.0.attention.self.query.weight" in names
    assert all(v > 0 for v in log.scalar("grad_norm").values)


def test_tensorboard_sink_is_readable_with_tensorboards_reader(tmp_path: Path) -> None:
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator"
    )
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    tb = tmp_path / "tb"
    with gradoc.watch(model, opt, out=tmp_path / "run", sinks={"tensorboard": str(tb)}):
        for step in range(12):
            x = torch.randn(8, 4)
            loss = F.mse_loss(model(x), x.sum(1, keepdim=True))
            if step == 7:
                loss = loss * float("nan")
            opt.zero_grad()
            loss.backward()
            opt.step()
    acc = event_accumulator.EventAccumulator(str(tb), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()
    assert {"loss", "grad_norm", "lr", "grad_norm/0.weight"} <= set(tags["scalars"])
    log = gradoc.open_run(tmp_path / "run")
    got = [e.value for e in acc.Scalars("grad_norm/0.weight")]
    want = log.param("0.weight", "grad_norm").values
    assert got == pytest.approx(want, rel=1e-6, nan_ok=True)
    assert "findings/text_summary" in tags["tensors"]
    text = acc.Tensors("findings/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "nonfinite" in text
