"""Never judge the unseen: a loss is judged only where it was read on most of its steps, a
run is told as it ended, and a fix is verified only by losses that were read.

The BiLSTM-CRF tutorial had its loss read on 1 step of 600 (its forward() decodes; the loss
comes from another method) and was called healthy; a mixture-density network whose loss was
NaN from step 28 to the end was said to have "ended at 0.658". Both shapes are written here
the programs' way, not the rules'.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import gradoc
from gradoc.analysis import analyze
from gradoc.detect import History
from gradoc.detect.history import synthetic
from gradoc.diagnose import diagnose
from gradoc.findings import check_all
from gradoc.fix.compare import NOT_JUDGED, Comparison, Side, verdict
from gradoc.store import Series


def _blown(n: int = 60) -> list[float]:
    """A loss that blows up at step 10 and stays up."""
    return [2.0 - 0.01 * i if i < 10 else 50.0 + i for i in range(n)]


def _read_on(h: History, steps: list[int], counted: int) -> History:
    """``h`` with its loss read only at ``steps`` of ``counted`` steps."""
    kept = [(s, v) for s, v in zip(h.loss.steps, h.loss.values) if s in steps]
    loss = Series([s for s, _ in kept], [v for _, v in kept])
    return dataclasses.replace(h, loss=loss, counted=counted, derived={})


def kinds(h: History) -> list[str]:
    return [f.kind for f in check_all(h) if f.severity != "info"]


def test_a_loss_read_on_fewer_than_half_its_steps_is_not_judged() -> None:
    h = synthetic(loss=_blown(), grad_norms={"w": [1.0] * 60})
    assert "loss_blowup" in kinds(h)  # read on every step: judged
    few = _read_on(h, [0, *range(10, 20)], counted=60)  # 11 of 60
    found = kinds(few)
    assert "loss_blowup" not in found and "loss_unread" in found
    most = _read_on(h, [*range(0, 60, 2), 59], counted=60)  # 31 of 60
    assert "loss_blowup" in kinds(most) and "loss_unread" not in kinds(most)


def test_the_report_says_on_how_many_steps_the_loss_was_read(tmp_path: Path) -> None:
    """A loss from torch.func has no backward(): the run says so and judges nothing of it."""
    from torch.func import functional_call, grad

    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def loss(params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        return (functional_call(model, params, (x,)) - x.sum(1, True)).pow(2).mean()

    with gradoc.watch(model, opt, out=tmp_path / "run") as run:
        for _ in range(12):
            params = {k: v.detach() for k, v in model.named_parameters()}
            grads = grad(loss)(params, torch.randn(8, 3))
            for name, p in model.named_parameters():
                p.grad = grads[name]
            opt.step()
    report = analyze(gradoc.open_run(run.dir))
    o = report.run.objectives[0]
    assert (o.steps, o.loss_read) == (12, 0)
    assert o.loss_unread is not None and "no backward()" in o.loss_unread
    assert o.coverage is not None and o.coverage.startswith("loss read on 0 of 12 steps")
    assert [f.kind for f in report.serious] == ["loss_unread"] and report.status != "healthy"


class Tagger(nn.Module):
    """The CRF shape: forward() decodes; the loss comes from ``nll``."""

    def __init__(self) -> None:
        super().__init__()
        self.emit = nn.Linear(4, 3)
        self.trans = nn.Parameter(torch.zeros(3, 3))

    def nll(self, x: torch.Tensor, tags: torch.Tensor) -> torch.Tensor:
        s = self.emit(x)
        alpha = s[0]
        for t in range(1, len(s)):
            alpha = torch.logsumexp(alpha[:, None] + self.trans, 0) + s[t]
        gold = s[torch.arange(len(tags)), tags].sum() + self.trans[tags[:-1], tags[1:]].sum()
        return torch.logsumexp(alpha, 0) - gold

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A greedy decode: the path's score (a scalar with a graph, as Viterbi's) and tags."""
        best = self.emit(x).max(-1)
        return best.values.sum(), best.indices


def test_a_loss_from_another_method_than_forward_is_read_on_every_step(tmp_path: Path) -> None:
    model = Tagger()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, tags = torch.randn(6, 4), torch.tensor([0, 1, 2, 1, 0, 2])
    with gradoc.watch(model, opt, out=tmp_path / "run") as run:
        model(x)  # a decode before training, with autograd on
        for _ in range(40):
            opt.zero_grad()
            model.nll(x, tags).backward()
            opt.step()
    log = gradoc.open_run(run.dir)
    assert log.num_steps == 40 and len(log.scalar("loss")) == 40
    report = analyze(log)
    assert report.run.objectives[0].coverage is None  # every step's: nothing to say
    assert report.status == "healthy", [f.summary for f in report.serious]
    # the decode's score forward() returned was never backpropagated: not how the loss is made
    assert report.run.loss_read is not None and "forward()" not in report.run.loss_read


class WithLoss(nn.Module):
    """nanoGPT's shape: forward returns the logits and the loss."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.fc(x)
        return logits, nn.functional.cross_entropy(logits, y)


def test_a_loss_forward_returned_and_backpropagated_is_said_to_come_from_it(
    tmp_path: Path,
) -> None:
    model = WithLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    with gradoc.watch(model, opt, out=tmp_path / "run") as run:
        for _ in range(5):
            opt.zero_grad()
            _, loss = model(x, y)
            (loss / 2).backward()
            opt.step()
    said = analyze(gradoc.open_run(run.dir)).run.loss_read
    assert said is not None and "returned by the model's forward()" in said


def test_a_run_that_ends_nan_is_told_as_ending_nan() -> None:
    """A blow-up that came back, then NaN to the last step: a nonfinite finding of its own,
    whatever heads the story, and no finite "ended at"."""
    loss = [1.0, 8.0, 3.0, 2.5, 2.0, 2.1, 1.9, 2.0] + [2.0] * 20 + [math.nan] * 30
    h = synthetic(loss=loss, grad_norms={"w": [1.0] * 28 + [math.nan] * 30})
    stories = diagnose(h, check_all(h))
    by_kind = {f.kind: f for f in stories}
    nan = by_kind["nonfinite"]
    assert "stayed non-finite from step 28 to the last step, 57" in nan.summary
    assert nan.details.to_json()["steps_after"] == 30  # type: ignore[union-attr]
    blowup = by_kind["loss_blowup"]  # the story's head says how the loss ended: not finite
    assert "ended at" not in blowup.summary and "non-finite from step 28" in blowup.summary
    assert nan.root_cause is not None and "loss_blowup" in nan.root_cause


def _side(steps: int, read: int, final: float = 1.0) -> Side:
    return Side("d", "problems", 0, steps, 1.0, 0.01, final, None, [1.0] * read, None, read)


def test_gradoc_fix_gives_no_verdict_from_a_loss_read_on_too_few_steps() -> None:
    def compared(before: Side, after: Side) -> Comparison:
        return Comparison([], [], [], before, after, 1.0)

    seen = compared(_side(600, 600, 2.0), _side(600, 600, 1.0))
    assert verdict(seen, "loss_blowup") == ("verified", [])
    for before, after in ((_side(600, 1), _side(600, 600)), (_side(600, 600), _side(600, 1))):
        said, why = verdict(compared(before, after), "loss_blowup")
        assert said == NOT_JUDGED and any("1 of its 600 steps" in w for w in why)
    ended_nan = compared(_side(600, 600, 2.0), _side(600, 600, math.nan))
    assert verdict(ended_nan, "loss_blowup")[0] == "did not help"


def test_a_gradient_penalty_is_no_loss_and_a_list_of_losses_is_their_sum(tmp_path: Path) -> None:
    """WGAN-GP's penalty takes ``autograd.grad(d(x), x, grad_outputs=ones)``: an inner
    gradient, not the step's loss; ``backward([a, b])`` computes the gradient of a + b."""
    critic = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = torch.optim.Adam(critic.parameters(), lr=1e-3)
    losses = []
    with gradoc.watch(critic, opt, out=tmp_path / "run") as run:
        for step in range(6):
            x = torch.randn(16, 2, requires_grad=True)
            out = critic(x)
            (g,) = torch.autograd.grad(out, x, torch.ones_like(out), create_graph=True)
            penalty = ((g.norm(dim=1) - 1) ** 2).mean()
            loss = out.mean()
            opt.zero_grad()
            if step % 2:
                torch.autograd.backward([loss, 10 * penalty])
            else:
                (loss + 10 * penalty).backward()
            opt.step()
            losses.append(float((loss + 10 * penalty).detach()))
    read = gradoc.open_run(run.dir).scalar("loss")
    assert read.steps == list(range(6))
    assert read.values == pytest.approx(losses, rel=1e-5)


def _run(loss: list[float], nan_at: int | None = None, **measures: list[str | float]) -> Side:
    finite = [v for v in loss if math.isfinite(v)]
    return Side("d", "problems", 0, len(loss), 1.0, 0.01, finite[-1] if finite else None, nan_at,
                loss, None, len(loss), dict(measures))  # fmt: skip


def test_a_fix_is_checked_in_the_programs_own_measure_and_each_check_is_said() -> None:
    falling = [2.0 - i / 200 for i in range(200)]
    before = _run(falling, **{"val/acc": ["up", 0.90]})
    worse = Comparison([], [], [], before, _run(falling, **{"val/acc": ["up", 0.60]}), 1.0)
    said, why = verdict(worse, "loss_blowup")
    assert said == "did not help"
    assert why == ["the program's val/acc ended worse: 0.6 against 0.9"]
    held = {c.check: c.held for c in worse.checks}
    assert held["the program's own measures no worse"] is False
    assert held["the finding is gone"] and held["both losses read on half their steps or more"]
    assert worse.to_json()["checks"] == [
        {"check": c.check, "held": c.held, "saw": c.saw} for c in worse.checks
    ]
    same = Comparison([], [], [], before, _run(falling, **{"val/acc": ["up", 0.89]}), 1.0)
    assert verdict(same, "loss_blowup") == ("verified", [])  # within its noise


def test_an_edit_of_the_objective_is_not_judged_by_the_losses_the_program_logs() -> None:
    """Labels -100 at the pads: the Trainer's logged ``train_loss`` is the new objective's, a
    different quantity (0.65 with the pads scored, 2.2 without); its accuracy is still read."""
    falling = [2.0 - i / 200 for i in range(200)]
    before = _run(falling, **{"train_loss": ["down", 0.65], "accuracy": ["up", 0.8]})
    masked = _run(falling, **{"train_loss": ["down", 2.2], "accuracy": ["up", 0.8]})
    assert verdict(Comparison([], [], [], before, masked, 1.0), "x", objective=True)[0] == (
        "verified"
    )
    assert "the program's train_loss ended worse" in " ".join(
        verdict(Comparison([], [], [], before, masked, 1.0), "x")[1]
    )
    fell = _run(falling, **{"train_loss": ["down", 2.2], "accuracy": ["up", 0.5]})
    said, why = verdict(Comparison([], [], [], before, fell, 1.0), "x", objective=True)
    assert said == "did not help" and why == ["the program's accuracy ended worse: 0.5 against 0.8"]


def test_a_nan_fix_whose_loss_stops_where_the_nan_was_did_not_help() -> None:
    """A clamp that froze what it guarded: the first run's loss turned NaN at step 50 of 200;
    the fixed run's is finite but never moves again from there."""
    nan_run = _run([2.0 - i / 100 for i in range(50)] + [math.nan] * 150, nan_at=50)
    stuck = _run([2.0 - i / 100 for i in range(50)] + [1.5] * 150)
    said, why = verdict(Comparison([], [], [], nan_run, stuck, 1.0), "nonfinite")
    assert said == "did not help"
    assert why == [
        "the fixed run's loss stood still at 1.5 from step 50, where the first run's turned "
        "non-finite: nothing trained past it"
    ]
    rising = _run([2.0 - i / 100 for i in range(50)] + [1.5 + i / 100 for i in range(150)])
    said, why = verdict(Comparison([], [], [], nan_run, rising, 1.0), "nonfinite")
    assert "did not go on past step 50" in why[-1]
    learns = _run([2.0 - i / 100 for i in range(200)])
    assert verdict(Comparison([], [], [], nan_run, learns, 1.0), "nonfinite") == ("verified", [])
