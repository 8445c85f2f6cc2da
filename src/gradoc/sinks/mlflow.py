"""MLflow, to a local store: ``sinks={"mlflow": "mlruns"}`` writes ``mlruns/mlflow.db`` and
``mlruns/artifacts`` (experiment ``gradoc``; ``mlflow ui --backend-store-uri
sqlite:///mlruns/mlflow.db`` shows it).

Every series of ``step_rows`` as metrics at its step (``/`` is kept: MLflow allows it), the
report as the artifact ``gradoc/report.json``, the status and each finding as tags.
"""

from __future__ import annotations

from pathlib import Path

from ..analysis import Report
from ..store import open_run
from ._series import finding_lines, step_rows


def tracking_uri(target: str | Path) -> str:
    """The local store: ``TARGET/mlflow.db`` (MLflow's file store is in maintenance mode)."""
    return f"sqlite:///{Path(target).resolve() / 'mlflow.db'}"


def export(run_dir: str | Path, target: str | Path, report: Report) -> None:
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    root = Path(target).resolve()
    root.mkdir(parents=True, exist_ok=True)
    client = MlflowClient(tracking_uri=tracking_uri(root))
    exp = client.get_experiment_by_name("gradoc")
    exp_id = (
        exp.experiment_id
        if exp is not None
        else client.create_experiment("gradoc", artifact_location=(root / "artifacts").as_uri())
    )
    run = client.create_run(exp_id, run_name=Path(run_dir).name)
    rid = run.info.run_id
    try:
        with open_run(run_dir) as log:
            metrics = [
                Metric(key, value, 0, step)
                for step, row in step_rows(log).items()
                for key, value in row.items()
            ]
        for i in range(0, len(metrics), 1000):  # MLflow's batch limit
            client.log_batch(rid, metrics=metrics[i : i + 1000])
        client.set_tag(rid, "gradoc.status", report.status)
        for i, line in enumerate(finding_lines(report)):
            client.set_tag(rid, f"gradoc.finding.{i}", line[:5000])
        client.log_dict(rid, report.to_json(), "gradoc/report.json")
    finally:
        client.set_terminated(rid)
