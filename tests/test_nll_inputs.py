"""``nll_loss`` fed what it does not take (issue 59, item 6): probabilities or raw scores,
through what sits between them and the loss in real programs (the training rows indexed out of
a graph's nodes, a dropout, a view). The graph shows what feeds the loss; its value confirms
it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_cli import gradoc_cli

PROGRAM = """\
import torch
import torch.nn.functional as F

torch.manual_seed(0)
n, k = 60, 4
adj = (torch.rand(n, n) < 0.1).float() + torch.eye(n)
adj = adj / adj.sum(1, keepdim=True)
x = torch.randn(n, 16)
y = torch.randint(0, k, (n,))
train = torch.arange(0, 40)
w1 = (torch.randn(16, 32) * 0.3).requires_grad_()
w2 = (torch.randn(32, k) * 0.3).requires_grad_()
b2 = torch.zeros(k, requires_grad=True)
opt = torch.optim.Adam([w1, w2, b2], lr=0.01)
for epoch in range(60):
    h = F.relu(adj @ (x @ w1))
    out = adj @ (h @ w2) + b2
    loss = {loss}
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done")
"""

CASES = {
    # the loss line: what gradoc must say (None: nothing)
    "probabilities_indexed": (
        "F.nll_loss(F.softmax(out, dim=1)[train], y[train])",
        "probabilities",
    ),
    "probs_dropout_view": (
        "F.nll_loss(F.dropout(F.softmax(out, 1), 0.1).view(n, k)[train], y[train])",
        "probabilities",
    ),
    "scores_indexed": ("F.nll_loss(out[train], y[train])", "raw scores"),
    "scores_dropout": ("F.nll_loss(F.dropout(out, 0.2)[train], y[train])", "raw scores"),
    "log_softmax_indexed": ("F.nll_loss(F.log_softmax(out, 1)[train], y[train])", None),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_nll_loss_on_what_it_does_not_take(name: str, tmp_path: Path) -> None:
    line, said = CASES[name]
    (tmp_path / "gcn.py").write_text(PROGRAM.replace("{loss}", line))
    done = gradoc_cli("run", "--out", "run", "gcn.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    findings = json.loads((tmp_path / "run" / "report.json").read_text())["findings"]
    found = [f for f in findings if f["kind"] == "loss_on_probabilities"]
    if said is None:
        assert not found, found
        return
    assert found and found[0]["severity"] == "warning", findings
    assert f"nll_loss was given {said}" in found[0]["summary"]
    assert findings[0]["kind"] == "loss_on_probabilities"  # the headline: it is the cause
    fixes = " ".join(f["action"] for f in found[0]["fixes"])
    assert "log_softmax" in fixes


def test_the_loss_reads_through_what_leaves_its_values(tmp_path: Path) -> None:
    """The walk below the loss stops at anything that computes (a log taken by hand is a
    log-probability, not raw scores)."""
    (tmp_path / "gcn.py").write_text(
        PROGRAM.replace(
            "{loss}", "F.nll_loss(torch.log(F.softmax(out, 1) + 1e-9)[train], y[train])"
        )
    )
    done = gradoc_cli("run", "--out", "run", "gcn.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    findings = json.loads((tmp_path / "run" / "report.json").read_text())["findings"]
    assert not [f for f in findings if f["kind"] == "loss_on_probabilities"]
