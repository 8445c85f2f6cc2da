"""Harm judged in the program's own measure (``detect.measures``, ``findings.measure_worsened``,
issue 59): a validation measure or a return the program logged says whether the run improved,
whatever its loss did.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from gradoc.detect.history import History
from gradoc.detect.measures import Measure, trend
from gradoc.findings import check_all
from gradoc.store import Series
from tests.test_cli import gradoc_cli


def _m(values: list[float], name: str = "val_acc", source: str = "lightning") -> Measure:
    way = "down" if "loss" in name else "up"
    return Measure(name, source, Series(list(range(len(values))), values), way, "the name")


def test_a_return_that_rose_improved_and_one_that_wanders_did_not() -> None:
    rose = trend(_m([20.0 + 5 * i for i in range(40)], "episode/return", "gym"))
    assert rose is not None and rose.verdict == "improved"
    assert "rose from" in rose.said()
    noise = [9.0, 10.0, 8.0, 11.0, 9.0] * 12  # a collapsed policy: 8 to 11 from the start
    wander = trend(_m([14.0, *noise], "episode/return", "gym"))
    assert wander is not None and wander.verdict == "flat"


def test_a_validation_loss_that_turned_up_worsened_from_its_best() -> None:
    curve = [2.0, 1.2, 0.8, 0.7, 0.75, 0.9, 1.1, 1.3, 1.4, 1.5, 1.6, 1.7]
    t = trend(_m(curve, "val_loss"))
    assert t is not None and t.verdict == "worsened" and t.best == 0.7 and t.best_step == 3
    assert t.said() == "the program's val_loss went from its best, 0.7 at step 3, to 1.7 at the end"


def test_few_values_or_no_direction_are_not_judged() -> None:
    assert trend(_m([0.1, 0.9, 0.5])) is None
    unknown = Measure("episode/length", "gym", Series(list(range(9)), [1.0] * 9), None, "")
    assert trend(unknown) is None


def test_a_rising_value_loss_is_no_harm_where_the_return_rose() -> None:
    """A critic's squared error grows with the returns it regresses onto: by the program's
    own measure the run improved, so the loss's blow-up is information."""
    steps = list(range(200))
    rising = [1.0 if s < 100 else 1.0 * 1.05 ** (s - 100) for s in steps]  # 1 -> 130
    base = History(loss=Series(steps, rising), grad_norm=Series(steps, [1.0] * 200), counted=200)
    alone = [f for f in check_all(base) if f.severity != "info"]
    assert any(f.kind in ("loss_blowup", "loss_divergence") for f in alone), alone
    returns = Series(steps[::5], [10.0 + s for s in steps[::5]])
    judged = History(
        loss=base.loss,
        grad_norm=base.grad_norm,
        counted=200,
        logged={"episode/return": ("gym", returns)},
    )
    found = check_all(judged)
    trends = [f for f in found if f.kind in ("loss_blowup", "loss_divergence")]
    assert trends and all(f.severity == "info" for f in trends)
    assert "the program's episode/return rose from" in trends[0].summary


def test_an_overfitting_program_is_told_from_its_validation_loss(tmp_path: Path) -> None:
    (tmp_path / "fit.py").write_text(
        textwrap.dedent(
            """\
            import torch
            import torch.nn as nn
            from torch.utils.tensorboard import SummaryWriter

            torch.manual_seed(0)
            w = torch.randn(20, 1)
            x = torch.randn(30, 20)
            y = x @ w + 3.0 * torch.randn(30, 1)
            xv = torch.randn(400, 20)
            yv = xv @ w + 3.0 * torch.randn(400, 1)
            net = nn.Sequential(nn.Linear(20, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(),
                                nn.Linear(256, 1))
            opt = torch.optim.Adam(net.parameters(), lr=1e-3)
            board = SummaryWriter("tb")
            for step in range(600):
                loss = nn.functional.mse_loss(net(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                if step % 20 == 0:
                    with torch.no_grad():
                        board.add_scalar("val/loss", nn.functional.mse_loss(net(xv), yv), step)
            """
        )
    )
    done = gradoc_cli("run", "--out", "run", "fit.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    head = report["findings"][0]
    assert head["kind"] == "measure_worsened" and head["severity"] == "warning"
    assert "went from its best" in head["summary"] and "(overfitting)" in head["summary"]
    assert head["hypotheses"][0]["cause"].startswith("overfitting")


def test_dead_units_in_a_run_whose_return_rose_are_information() -> None:
    """Dead units are judged by harm (issue 59): a critic's layer half inactive in an agent
    whose return rose did not stop it; the same layer beside a falling return stays a
    warning, with the fall a finding of its own."""
    from gradoc.detect.finding import Finding
    from gradoc.findings import _measured

    steps = list(range(100))

    def dead() -> list[Finding]:
        return [
            Finding(kind="dead_units", severity="warning", step=20, layer="critic.3", summary="")
        ]

    rose = History(
        counted=100, logged={"episode/return": ("gym", Series(steps, [float(s) for s in steps]))}
    )
    found = dead()
    _measured(found, rose)
    assert found[0].severity == "info" and "episode/return rose from" in found[0].summary
    fell = History(
        counted=100, logged={"episode/return": ("gym", Series(steps, [100.0 - s for s in steps]))}
    )
    found = dead()
    _measured(found, fell)
    assert found[0].severity == "warning"
    assert "measure_worsened" in [f.kind for f in check_all(fell)]


def _game(g_loss: list[float], d_loss: list[float], g_grad: list[float]) -> History:
    """A generator and a discriminator, each one parameter, their losses and the generator's
    gradient norm per step."""
    from gradoc.detect.training import Objective, Training
    from gradoc.store.reader import Layer

    steps = list(range(len(g_grad)))
    params = [
        Layer(0, "param", "d.w", "d", "Linear", (1,), 1, 0, 0),
        Layer(1, "param", "g.w", "g", "Linear", (1,), 1, 0, 1),
    ]
    h = History(
        params=params,
        param_stats={"g.w": {"grad_norm": Series(steps, g_grad)}},
        counted=len(steps),
    )
    h.derived["objectives"] = [
        Objective(
            0, "d", Series(steps, d_loss), Training.ADVERSARIAL, "discriminator", optimizers=[0]
        ),
        Objective(1, "g", Series(steps, g_loss), Training.ADVERSARIAL, "generator", optimizers=[1]),
    ]
    return h


def test_a_game_at_a_stalemate_stopped_and_a_played_one_did_not() -> None:
    """The discriminator at 0.5 for everything: both losses frozen at ln 2 and the generator's
    gradient a trace (2e-3 of its start, not gone) is the game stopped; the same faint
    gradient while the losses still move is a game being played."""
    from gradoc.findings import REGISTRY

    n = 200
    grad = [0.05] * 100 + [1e-4] * 100
    frozen = [0.9 - 0.002 * i for i in range(100)] + [0.6931] * 100
    (found,) = REGISTRY["game_stopped"].check(_game(frozen, frozen, grad))
    assert found.step == 100 and found.severity == "error"
    moving = [0.69 + 0.1 * ((i * 7) % 5 - 2) for i in range(n)]
    assert REGISTRY["game_stopped"].check(_game(moving, moving, grad)) == []
