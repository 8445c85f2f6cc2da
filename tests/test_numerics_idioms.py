"""A NaN explained by its numerics and repaired with the stable idiom (issue 58).

tests/numerics/ holds programs of our own, one pair per mechanism, each written two ways (a
module, a free function, a lambda, a loss class; float32 and float16): a hand-written
log-sum-exp, the log of a softmax, a product of probabilities, a sigmoid rounded to 1 (before a
``log`` and under a division by ``1 - p``), a tanh rounded to 1 (before ``log(1 - t**2)`` and
``atanh``), an ``exp`` and a matrix product under float16 autocast past the dtype's largest value, a norm, a standard deviation, a one-sample std, a
length minus one and a mask's count of 0, a square root's backward at 0, E[x²] - E[x]², an
``acos`` past 1, a fractional power of a negative, and a causal mask that hides a whole
row (its comparison inverted, its diagonal hidden too). Each runs unchanged under ``gradoc
run``: the root cause names the mechanism in the run's numbers, the fix names the idiom, and
``gradoc fix`` writes the idiom's edit and verifies it by a re-run.
"""

# ruff: noqa: E501
from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest
import torch

import gradoc
from gradoc.detect.finding import CodeLine, Finding, Mechanism, Origin, Reading
from gradoc.fix.patch import Edit, edit_for
from gradoc.locate import mechanism
from tests.test_cli import gradoc_cli

PROGRAMS = Path(__file__).parent / "numerics"

# fmt: off
CASES: dict[str, tuple[str, str, str]] = {
    # program: (mechanism, a number or words of the run its sentence holds, the edit writes)
    "lse_module": ("exp_sum_underflow", "inputs of exp on the failing row", "torch.logsumexp"),
    "lse_function": ("exp_sum_underflow", "their sum was 0.0", "torch.logsumexp(scores, dim=0)"),
    "logsoftmax_module": ("log_of_softmax", "exactly 0.0 in float32", "torch.log_softmax"),
    "logsoftmax_lambda": ("log_of_softmax", "the logits spread over", ".log_softmax(-1)"),
    "product_function": ("product_underflow", "probabilities", "torch.log(step_prob).sum(dim=1)"),
    "product_module": ("product_underflow", "underflowed to 0.0", "torch.log(probs).sum(-1)"),
    "sigmoid_class": ("sigmoid_rounded", "rounded to exactly 1.0", "torch.nn.functional.logsigmoid(-z)"),
    "sigmoid_twolines": ("sigmoid_rounded", "rounded to exactly 1.0", "logsigmoid(-(X @ theta))"),
    "tanh_squash": ("tanh_rounded", "1 - p**2 = 0", "- (2 * (0.6931471805599453 - u - torch.nn.functional.softplus(-2 * u)))"),
    "tanh_inverse": ("tanh_rounded", "atanh(±1) = ±inf", "pre = y_pre"),
    "odds_ratio": ("saturated_division", "1 - p = 0 under the division", "odds = lambda z: torch.exp(z)"),
    "ipw_weight": ("saturated_division", "above 16.636", "(1 - treated) * (1 + torch.exp(e_logit).squeeze(-1))"),
    "attention_half": ("overflow", "computed in float32", "scores = q.float() @ k.transpose(-2, -1).float()"),
    "gram_half": ("overflow", "65,504", "product = torch.bmm(features.float(), features.transpose(1, 2).float())"),
    "overflow_half": ("overflow", "65,504", ".float())"),
    "overflow_module": ("overflow", "exp is inf above 88.7", ".clamp(max=80.0).exp()"),
    "norm_contrastive": ("zero_norm", "all-zero vectors", "torch.nn.functional.normalize(z, dim=1)"),
    "norm_function": ("zero_norm", "all-zero vectors", "torch.nn.functional.normalize(v, dim=-1)"),
    "std_module": ("zero_std", "constant rows", "torch.sqrt(x.var(1, keepdim=True) + 1e-5)"),
    "std_function": ("zero_std", "constant rows", "torch.sqrt(h.var(dim=0) + 1e-5)"),
    "onesample_advantage": ("one_sample", "n - 1 = 0", "ret.std(correction=0)"),
    "onesample_loader": ("one_sample", "n - 1 = 0", "torch.std(pred, correction=0)"),
    "onesample_minibatch": ("one_sample", "n - 1 = 0", "/ (g.std(correction=0) + 1e-8)"),
    "length_position": ("zero_length", "length minus one", "(lengths[:, None] - 1).clamp_min(1)"),
    "length_masked_mean": ("zero_length", "all padding", "mask.sum(1, keepdim=True).clamp_min(1)"),
    "sqrt_triplet": ("sqrt_at_zero", "1 / (2 sqrt(0))", "torch.sqrt(((ea - ep) ** 2).sum(-1) + 1e-12)"),
    "sqrt_power": ("sqrt_at_zero", "1 / (2 sqrt(0))", "((diff * diff).sum(-1) + 1e-12) ** 0.5"),
    "variance_layernorm": ("variance_cancellation", "E[x²] - E[x]²", "torch.var(h, -1, keepdim=True, correction=0)"),
    "variance_function": ("variance_cancellation", "E[x²] - E[x]²", "torch.var(x, 0, correction=0)"),
    "cosine_angle": ("cosine_past_one", "past ±1", "cos.clamp(-1 + 1e-7, 1 - 1e-7)"),
    "cosine_module": ("cosine_past_one", "past ±1", "dot.clamp(-1 + 1e-7, 1 - 1e-7)"),
    "power_gamma": ("fractional_power", "fractional power 0.45", "dec(z).clamp_min(1e-6) ** 0.45"),
    "power_function": ("fractional_power", "fractional power 1.5", "(1 - score).clamp_min(1e-6)"),
    "mask_inverted": ("masked_row", "held -inf at every position", "masked_fill(~self.allowed[:n, :n]"),
    "mask_diagonal": ("masked_row", "0/0 is NaN", "torch.ones(LENGTH, LENGTH).triu(diagonal=1).bool()"),
}
# fmt: on


def test_every_program_is_a_case() -> None:
    assert {p.stem for p in PROGRAMS.glob("*.py")} == set(CASES)
    assert {m for m, _, _ in CASES.values()} <= set(mechanism.CATALOGUE)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_nan_is_explained_and_repaired_with_its_idiom(name: str, tmp_path: Path) -> None:
    expected, words, written = CASES[name]
    shutil.copy(PROGRAMS / f"{name}.py", tmp_path)
    run = tmp_path / "run"
    done = gradoc_cli("run", "--out", str(run), f"{name}.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads((run / "report.json").read_text())
    nonfinite = next(f for f in report["findings"] if f["kind"] == "nonfinite")
    said = nonfinite["origin"]["mechanism"]
    assert said["name"] == expected, said
    assert words in said["said"], said["said"]
    root = nonfinite["hypotheses"][0]["cause"]
    assert said["said"] in root  # the root cause says the mechanism in the run's numbers
    idiom = mechanism.CATALOGUE[expected].idiom.split("`")[1].split("(")[0]
    fixes = " ".join(f["action"] for f in nonfinite["fixes"])
    assert "stable form" in fixes and said["idiom"] in fixes, fixes
    assert idiom.split(".")[-1] in said["idiom"] or expected in ("overflow", "zero_length")

    fixed = gradoc_cli("fix", "--json", "fix.json", "run", f"{name}.py", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    result = json.loads((tmp_path / "fix.json").read_text())
    assert result["verdict"] == "verified", result.get("why_not")
    after = "\n".join(result["patch"]["after"])
    assert written in after, after
    assert "clamp_min(1e-6)" not in after or expected == "fractional_power"
    assert (tmp_path / f"{name}.py").read_text() == (PROGRAMS / f"{name}.py").read_text()


INHERITED = {
    # program: what its sentence says (which values, when they became so), the root cause
    "inherited_rows": (
        "(rows 12-16 of the batch, feature 4) were already NaN/Inf when the model took it at step 9",
        "input batch",
    ),
    "inherited_update": (
        "(head_b.weight first) were already NaN/Inf before the forward of step 1: the update of step 0 wrote them",
        "eps (0)",
    ),
}


@pytest.mark.parametrize("name", sorted(INHERITED))
def test_an_inherited_nan_says_which_values_and_when_they_became_so(
    name: str, tmp_path: Path
) -> None:
    """An input already NaN (a table's gaps) and weights an update wrote NaN (Adam with eps=0
    on a head whose task weighs 0 in warm-up): no idiom, the values and the step said."""
    said, cause = INHERITED[name]
    shutil.copy(PROGRAMS / "inherited" / f"{name}.py", tmp_path)
    done = gradoc_cli("run", "--out", "run", f"{name}.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    f = next(
        f
        for f in json.loads((tmp_path / "run" / "report.json").read_text())["findings"]
        if f["kind"] == "nonfinite"
    )
    m = f["origin"]["mechanism"]
    assert m["name"] == "inherited" and said in m["said"], m
    assert cause in f["hypotheses"][0]["cause"]


def _born(fn) -> Origin:  # type: ignore[no-untyped-def]
    with gradoc.check_numerics(raise_error=False) as check:
        fn().backward()
    assert check.origin is not None
    return check.origin


def test_the_numbers_of_an_underflow_are_the_runs() -> None:
    x = torch.tensor([[-10_000.0, -10_002.0, -10_001.0]], requires_grad=True)
    m = _born(lambda: torch.log(torch.exp(x).sum(1)).sum()).mechanism
    assert m is not None and m.name == "exp_sum_underflow"
    assert "the 3 inputs of exp" in m.said and "<= -10,000" in m.said and "-103.28" in m.said
    assert {e.signal: e.value for e in m.evidence}["largest input of exp"] == -10_000.0


def test_a_sigmoid_rounded_to_one_says_where_it_rounds() -> None:
    z = torch.tensor([3.0, 17.5, 40.0], requires_grad=True)
    m = _born(lambda: torch.log(1 - torch.sigmoid(z)).sum()).mechanism
    assert m is not None and m.name == "sigmoid_rounded"
    assert "at 2 values" in m.said and "reached 40" in m.said and "above 16.636" in m.said


def test_a_float16_overflow_names_its_limit_and_the_float32_value() -> None:
    a = torch.full((2, 64), 40.0, dtype=torch.float16, requires_grad=True)
    m = _born(lambda: (a @ a.T).sum()).mechanism
    assert m is not None and m.name == "overflow" and "65,504" in m.said
    assert "computed in float32 its largest |value| is 1.024e+05" in m.said


def test_an_rmsnorm_without_eps_is_a_root_of_zero(tmp_path: Path) -> None:
    h = torch.zeros(2, 4)
    h[0] = 1.0
    h.requires_grad_()
    m = _born(lambda: (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True))).sum()).mechanism
    assert m is not None and m.name == "root_of_zero" and "1 value under rsqrt" in m.said
    f = tmp_path / "m.py"
    f.write_text("y = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True))\n")
    edit = edit_for([_finding(f, 1, "root_of_zero")])
    assert edit is not None
    assert edit.after == ("y = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)",)


def test_an_input_already_nan_is_an_inherited_value_said_with_when() -> None:
    from gradoc.locate import check_inputs

    batch = torch.ones(4, 3)
    batch[2, 1] = float("nan")
    origin = check_inputs(7, ((batch,), {}))
    assert origin is not None and origin.mechanism is not None
    assert origin.mechanism.name == "inherited"
    assert (
        "1 of the 12 values of a float32 input (row 2 of the batch, feature 1)"
        in origin.mechanism.said
    )
    assert "at step 7" in origin.mechanism.said


def test_a_division_by_zero_of_unknown_making_has_no_idiom_and_says_so() -> None:
    d = torch.tensor([0.0, 2.0])
    x = torch.ones(2, requires_grad=True)
    m = _born(lambda: (x / d).sum()).mechanism
    assert m is not None and m.name in mechanism.NO_IDIOM and m.idiom.startswith("no idiom")


def test_a_divisor_of_whole_numbers_made_out_of_sight_is_a_count() -> None:
    """A mask summed without gradient leaves the graph no maker to read: its values (whole
    numbers, several of them) say it is a count; a divisor of fractions stays unexplained."""
    x = torch.ones(4, requires_grad=True)
    counts = torch.tensor([3.0, 0.0, 5.0, 1.0])
    m = _born(lambda: (x / counts).sum()).mechanism
    assert m is not None and m.name == "zero_length", m
    assert "whole numbers from 0 to 5" in m.said and "(1 of 4)" in m.said
    spread = torch.tensor([0.5, 0.0, 1.5, 2.0])
    m = _born(lambda: (x / spread).sum()).mechanism
    assert m is not None and m.name == "zero_divisor"


def test_the_ruled_out_rate_and_the_html_use_the_mechanism(tmp_path: Path) -> None:
    shutil.copy(PROGRAMS / "lse_module.py", tmp_path)
    done = gradoc_cli("run", "--out", "run", "lse_module.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    f = json.loads((tmp_path / "run" / "report.json").read_text())["findings"][0]
    why = [r["why"] for r in f["ruled_out"] if r["cause"] == "learning rate too high"]
    assert any("an underflow of" in w and "before any update could matter" in w for w in why)
    page = tmp_path / "r.html"
    assert gradoc_cli("report", str(tmp_path / "run"), "--html", str(page)).returncode == 0
    html = page.read_text()
    located = html.index('class="hit"')
    assert html.index("exp_sum_underflow", located) - located < 2000  # beside the line
    assert "every exp in the sum underflowed" in html and "torch.logsumexp" in html


def test_the_op_of_a_statement_over_two_lines_is_placed_on_its_own_line(tmp_path: Path) -> None:
    shutil.copy(PROGRAMS / "sigmoid_twolines.py", tmp_path)
    done = gradoc_cli("run", "--out", "run", "sigmoid_twolines.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    origin = json.loads((tmp_path / "run" / "report.json").read_text())["findings"][0]["origin"]
    assert origin["code"] == "+ (1 - Y) * torch.log(1 - prob)).mean()"
    assert origin["line"] == 13


def _finding(file: Path, line: int, name: str) -> Finding:
    code = file.read_text().splitlines()[line - 1].strip()
    origin = Origin(
        phase="forward",
        step=0,
        op="aten.log.default",
        file=str(file),
        line=line,
        code=code,
        mechanism=Mechanism("underflow", name, "", mechanism.CATALOGUE[name].idiom),
    )
    return Finding(
        kind="nonfinite", severity="error", step=0, layer=None, summary="", origin=origin
    )


def test_an_idiom_is_written_only_where_the_line_holds_its_shape(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text(
        textwrap.dedent(
            """\
            import torch
            s = probs.sum(1)
            y = torch.log(s)
            """
        )
    )
    assert edit_for([_finding(f, 3, "exp_sum_underflow")]) is None  # no clamp either


def test_a_log_sum_exp_split_over_two_statements_is_written_as_one(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text(
        textwrap.dedent(
            """\
            import torch
            s = torch.exp(x).sum(1)
            y = torch.log(s)
            z = torch.log(torch.exp(x).sum())
            """
        )
    )
    edit = edit_for([_finding(f, 3, "exp_sum_underflow")])
    assert edit is not None and edit.line == 3 and edit.end == 4  # the same form below too
    assert edit.after == ("y = torch.logsumexp(x, 1)", "z = torch.logsumexp(x.flatten(), 0)")


def test_a_squash_of_an_expression_is_named_before_its_logit_is_used(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text(
        textwrap.dedent(
            """\
            import math
            import torch
            def f(x, net):
                t = torch.tanh(net(x))[:, 0]
                return torch.log(1 - t)
            """
        )
    )
    edit = edit_for([_finding(f, 5, "tanh_rounded")])
    assert edit is not None and edit.line == 4
    assert edit.after == (
        "    t_pre = net(x)",
        "    t = torch.tanh(t_pre)[:, 0]",
        "    return (math.log(2) + torch.nn.functional.logsigmoid(-2 * t_pre))[:, 0]",
    )


def test_a_float16_product_without_autocast_in_sight_is_computed_from_a_named_operand(
    tmp_path: Path,
) -> None:
    f = tmp_path / "m.py"
    f.write_text("def f(q, k):\n    return torch.softmax(q @ k.T, -1)\n")
    finding = _finding(f, 2, "overflow")
    assert finding.origin is not None and finding.origin.mechanism is not None
    finding.origin.mechanism.evidence.append(Reading("dtype", "float16", {"dtype": "float16"}))
    edit = edit_for([finding])
    assert edit is not None
    assert edit.after == (
        "    with torch.autocast(device_type=q.device.type, enabled=False):",
        "        product = q.float() @ k.T.float()",
        "    return torch.softmax(product, -1)",
    )


def test_an_edit_over_several_lines_is_applied_whole_or_refused(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("a = (1 +\n     2)\nb = 3\n")
    edit = Edit("nonfinite", str(f), 1, "a = (1 +\n     2)", ("a = 3",), "fold", end=2)
    edit.apply()
    assert f.read_text() == "a = 3\nb = 3\n"
    with pytest.raises(Exception, match="no longer reads"):
        edit.apply()


def test_the_mechanism_survives_the_report() -> None:
    m = Mechanism("zero", "zero_norm", "said", "idiom", [])
    o = Origin(phase="forward", step=1, mechanism=m)
    assert Origin.from_json(json.loads(json.dumps(o.to_json()))).mechanism == m
    assert CodeLine("f", 1, "x").to_json()["line"] == 1


def test_a_nan_entering_where_a_framework_calls_backward_is_found_in_the_step_that_made_it(
    tmp_path: Path,
) -> None:
    """Lightning's ``manual_backward`` calls ``backward()`` for the program: the variables of
    the NaN (advantages normalised without gradient in a batch of one) are the training
    step's, one frame out, not the framework's."""
    (tmp_path / "framework.py").write_text("def manual_backward(loss):\n    loss.backward()\n")
    (tmp_path / "ppo.py").write_text(
        textwrap.dedent(
            """\
            import torch
            from framework import manual_backward

            torch.manual_seed(0)
            actor = torch.nn.Linear(4, 2)
            opt = torch.optim.SGD(actor.parameters(), lr=0.01)


            def training_step(state, adv):
                adv = (adv - adv.mean()) / adv.std()
                logp = torch.log_softmax(actor(state), -1)[:, 0]
                loss = -(logp * adv).mean()
                opt.zero_grad()
                manual_backward(loss)
                opt.step()


            for n in (8, 8, 1):
                training_step(torch.randn(n, 4), torch.randn(n))
            """
        )
    )
    done = gradoc_cli("run", "--out", "run", "ppo.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    f = json.loads((tmp_path / "run" / "report.json").read_text())["findings"][0]
    origin = f["origin"]
    assert origin["file"].endswith("ppo.py") and origin["line"] == 10, origin
    assert origin["mechanism"]["name"] == "one_sample"
    assert "without a replay" in origin["note"]  # read at backward(), the program not re-run
