"""gradoc in Jupyter: a real notebook, executed by nbclient in an IPython kernel.

A watched run shows a live one-line status in its cell while it trains; evaluating the
closed run, or ``gradoc.open_run(...)``, shows its report inline (the diagnosis and the
charts of report.html, in an iframe).
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

TRAIN = """
import time
import torch, gradoc

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
with gradoc.watch(model, opt, out=OUT) as run:
    for step in range(40):
        x = torch.randn(8, 4)
        scale = torch.tensor(0.0 if step == 30 else 1.0)
        loss = (model(x) / scale).pow(2).mean()  # a division by zero at step 30: NaN
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.06)  # 2.4 s in all: the status line is rewritten on the way
"""


def html_outputs(cell: dict) -> list[str]:
    return [o["data"]["text/html"] for o in cell["outputs"] if "text/html" in o.get("data", {})]


def page_in(frame: str) -> str:
    """The report page an iframe holds in its ``srcdoc``."""
    found = re.search(r'srcdoc="([^"]*)"', frame)
    assert found is not None, frame[:300]
    return html.unescape(found.group(1))


def test_a_notebook_shows_a_live_status_then_the_report_inline(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(f"OUT = {str(tmp_path / 'run')!r}\n" + TRAIN),
        nbformat.v4.new_code_cell("run"),
        nbformat.v4.new_code_cell("gradoc.open_run(run.dir)"),
    ]
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    train, shown, opened = nb.cells

    # the status: one display, rewritten in place, its last words those of the close
    [status] = html_outputs(train)
    assert "gradoc-status" in status
    assert "step 40" in status and "done in" in status, status
    assert "steps/s" in status and "loss" in status, status

    # the run, then its log: the report's page, with the diagnosis and the charts
    for cell in (shown, opened):
        [frame] = html_outputs(cell)
        assert frame.startswith("<iframe") and 'class="gradoc-report"' in frame
        page = page_in(frame)
        assert '<section id="diagnosis">' in page
        text = re.sub(r"<[^>]+>", " ", page)
        assert re.search(r"nonfinite at step\s+30", text), text[:2000]  # the division by 0
        assert "id='chart-loss'" in page and "<svg" in page
    assert page_in(html_outputs(shown)[0]) == page_in(html_outputs(opened)[0])


def test_outside_a_notebook_there_is_no_status_and_repr_html_is_the_report(
    tmp_path: Path,
) -> None:
    import torch

    import gradoc
    from gradoc.collect.probes.notebook import LiveStatus, in_notebook

    assert not in_notebook()
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradoc.watch(model, opt, out=tmp_path / "run") as run:
        assert not any(isinstance(p, LiveStatus) for p in run.steps.probes)
        for _ in range(3):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        assert "training: step 3" in run._repr_html_()
    assert "No problem found" in page_in(run._repr_html_())


def test_the_status_loss_is_the_loss_the_run_log_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With gradient accumulation (each micro-batch's loss divided by their number), the
    status shows the step's loss as the log records it, the division undone."""
    import torch

    import gradoc
    from gradoc.collect.probes.notebook import LiveStatus
    from gradoc.collect.step import protocol as steps

    monkeypatch.setattr(steps, "in_notebook", lambda: True)  # IPython's display prints here
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradoc.watch(model, opt, out=tmp_path / "run") as run:
        assert any(isinstance(p, LiveStatus) for p in run.steps.probes)
        for _ in range(12):
            opt.zero_grad()
            for _ in range(2):
                (model(torch.randn(8, 4)).pow(2).mean() / 2).backward()
            opt.step()
        run.flush()
        step, loss = run.steps.last_loss
    logged = gradoc.open_run(run.dir).scalar("loss")
    assert step == 11
    assert loss == pytest.approx(logged.values[logged.steps.index(step)], rel=1e-6)
