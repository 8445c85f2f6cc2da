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
    tb = tmp_path / "tb"
    _run_with_sink(tmp_path, {"tensorboard": str(tb)})
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


def _run_with_sink(tmp_path: Path, sinks: dict[str, str]) -> Path:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradoc.watch(model, opt, out=tmp_path / "run", sinks=sinks) as run:
        for step in range(6):
            x = torch.randn(8, 4)
            loss = F.mse_loss(model(x), x.sum(1, keepdim=True))
            if step == 4:
                loss = loss * float("nan")
            opt.zero_grad()
            loss.backward()
            opt.step()
    return run.dir


def _wandb_records(path: Path) -> list[object]:
    """The records of an offline .wandb file (LevelDB-log framing: 32 KiB blocks, 7-byte
    record headers; a 7-byte file header), decoded with wandb's own protobuf."""
    import struct

    from wandb.proto import wandb_internal_pb2

    data, pos, block, buf, out = path.read_bytes(), 7, 32768, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        buf += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last piece of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(buf)
            out.append(record)
            buf = b""
    return out


def test_wandb_offline_sink(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("wandb")
    import wandb

    run_dir = _run_with_sink(tmp_path, {"wandb": str(tmp_path / "wb")})
    # run.finish() returns once wandb's handler closed; its writer finishes the .wandb file
    # a moment later, at the latest when the service is torn down (at the program's exit)
    wandb.teardown()
    (path,) = (tmp_path / "wb" / "wandb").glob("offline-run-*/*.wandb")
    records = _wandb_records(path)
    history = [
        {i.key or "/".join(i.nested_key): i.value_json for i in r.history.item}  # type: ignore[attr-defined]
        for r in records
        if r.WhichOneof("record_type") == "history"  # type: ignore[attr-defined]
    ]
    # what wandb itself said, should the rows be missing
    why = (
        f"records: {[r.WhichOneof('record_type') for r in records]}; "  # type: ignore[attr-defined]
        f"stderr: {capfd.readouterr().err[-2000:]}; "
        + "".join(
            f"{log.name}: {log.read_text(errors='replace')[-3000:]}"
            for log in (tmp_path / "wb" / "wandb").glob("offline-run-*/logs/debug*.log")
        )
    )
    assert [int(h["_step"]) for h in history] == list(range(6)), why
    want = gradoc.open_run(run_dir).scalar("grad_norm").values
    got = [float(h["grad_norm"]) if h["grad_norm"] != "NaN" else float("nan") for h in history]
    assert got == pytest.approx(want, rel=1e-6, nan_ok=True)
    summary = [
        (i.key or "/".join(i.nested_key), i.value_json)
        for r in _wandb_records(path)
        if r.WhichOneof("record_type") == "summary"  # type: ignore[attr-defined]
        for i in r.summary.update  # type: ignore[attr-defined]
    ]
    assert any(k == "gradoc/findings" and "nonfinite" in v for k, v in summary)


def test_mlflow_sink_through_its_client(tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    run_dir = _run_with_sink(tmp_path, {"mlflow": str(tmp_path / "mlruns")})
    from gradoc.sinks.mlflow import tracking_uri

    client = MlflowClient(tracking_uri=tracking_uri(tmp_path / "mlruns"))
    exp = client.get_experiment_by_name("gradoc")
    (run,) = client.search_runs([exp.experiment_id])
    history = client.get_metric_history(run.info.run_id, "loss")
    want = gradoc.open_run(run_dir).scalar("loss").values
    assert [m.step for m in history] == list(range(6))
    assert [m.value for m in history] == pytest.approx(want, rel=1e-6, nan_ok=True)
    assert run.data.tags["gradoc.status"] == "problems"
    assert any("nonfinite" in v for k, v in run.data.tags.items() if k.startswith("gradoc.finding"))
