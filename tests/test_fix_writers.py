"""The edits ``gradoc fix`` writes for the fixes that change the program (``fix.patch``):
each writer's edit from the line the run recorded, and the lines that must get none."""

from __future__ import annotations

import os
import shutil
import socket
import textwrap
from pathlib import Path
from typing import Any

import pytest

from gradoc.detect.finding import Finding, Origin, Reading
from gradoc.fix.patch import edit_for
from gradoc.locate.replay import NUMBER_DENOMINATOR
from gradoc.runtime.workcopy import CopyRefused, working_copy
from gradoc.store.meta import RunMeta


def _finding(kind: str, details: dict[str, Any] | None = None, **more: Any) -> Finding:
    return Finding(
        kind=kind, severity="warning", step=0, layer=None, summary="", details=details or {}, **more
    )


def _file(tmp_path: Path, source: str, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source).lstrip("\n"))
    return path


def _at(path: Path, line: int, **more: Any) -> dict[str, Any]:
    code = path.read_text().splitlines()[line - 1].strip()
    return {"file": str(path), "line": line, "code": code, **more}


def _after(edit: Any) -> list[str] | None:
    return list(edit.after) if edit is not None else None


@pytest.mark.parametrize(
    ("line", "model", "after"),
    [
        (
            "    out = model(x)",
            "model",
            ["    model.train()  # BatchNorm and dropout as in training", "    out = model(x)"],
        ),
        ("    loss = F.cross_entropy(net(x), y)", "net", None),  # below: model is None
        ("    for x in xs: out = model(x)", "model", None),  # a line before it is not its block
        ("    out = model(x)", None, None),  # the model's variable unknown
    ],
)
def test_train_mode_goes_before_the_line_that_calls_the_model(
    tmp_path: Path, line: str, model: str | None, after: list[str] | None
) -> None:
    path = _file(tmp_path, f"while True:\n{line}\n")
    name = model if "net(" not in line else None
    meta = RunMeta(forward_at=_at(path, 2, model=name))
    edit = edit_for([_finding("eval_mode")], meta)
    assert _after(edit) == after
    if edit is not None:
        assert edit.objective  # the loss in training mode is not the loss in eval()


@pytest.mark.parametrize(
    ("fed", "source", "after"),
    [
        ("probabilities", "        self.out = nn.Softmax(dim=1)", "nn.LogSoftmax(dim=1)"),
        ("probabilities", "    p = F.softmax(logits, dim=-1)", "F.log_softmax(logits, dim=-1)"),
        ("softmax", "        self.out = nn.Softmax(dim=1)", "self.out = nn.Identity()"),
        ("softmax", "    return F.softmax(self.fc(h), dim=-1)", "return self.fc(h)"),
        ("softmax", "    return logits.softmax(-1)", "return logits"),
        ("sigmoid", "    return torch.sigmoid(z)", "return z"),
        ("sigmoid", "    return self.head(h).sigmoid()", "return self.head(h)"),
    ],
)
def test_the_squashing_before_a_loss_is_made_a_log_or_removed(
    tmp_path: Path, fed: str, source: str, after: str
) -> None:
    path = _file(tmp_path, f"def f():\n{source}\n", "model.py")
    edit = edit_for([_finding("loss_on_probabilities", {"fed": fed})], None, [path])
    assert edit is not None and edit.line == 2
    assert edit.after[0].strip().endswith(after), edit.after
    assert edit.objective


def test_no_squashing_edit_where_the_files_hold_two(tmp_path: Path) -> None:
    model = _file(tmp_path, "out = nn.Softmax(dim=1)\n", "model.py")
    train = _file(tmp_path, "probs = logits.softmax(1)  # accuracy\n")
    finding = _finding("loss_on_probabilities", {"fed": "probabilities"})
    assert edit_for([finding], None, [train, model]) is None
    assert edit_for([finding], None, [model]) is not None


@pytest.mark.parametrize(
    ("line", "pad", "after"),
    [
        (
            "out = lm(input_ids=ids, attention_mask=mask, labels=ids)",
            None,
            "out = lm(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100))",
        ),
        (
            'out = lm(batch["ids"], labels=batch["ids"])',
            0,
            'out = lm(batch["ids"], labels=batch["ids"].masked_fill(batch["ids"] == 0, -100))',
        ),
        ('out = lm(batch["ids"], labels=batch["ids"])', None, None),  # no mask, no pad token
        ("out = lm(**batch)", 0, None),  # the labels are not on the line
    ],
)
def test_labels_get_minus_100_at_the_pads_where_the_model_is_called(
    tmp_path: Path, line: str, pad: int | None, after: str | None
) -> None:
    path = _file(tmp_path, line + "\n")
    meta = RunMeta(forward_at=_at(path, 1, model="lm"), lengths={"pad_id": pad})
    edit = edit_for([_finding("loss_includes_padding", {"model_loss": True})], meta)
    assert _after(edit) == ([after] if after else None)


@pytest.mark.parametrize(
    ("line", "param", "after"),
    [
        (
            "out = bert(token_ids, labels=labels)",
            "attention_mask",
            "out = bert(token_ids, labels=labels, attention_mask=(token_ids != 0).long())",
        ),
        ("h = enc(x,)", "src_key_padding_mask", "h = enc(x, src_key_padding_mask=x == 0)"),
        ("out = bert(**batch)", "attention_mask", None),  # the mask may be in the batch
        ("out = bert(ids, attention_mask=None)", "attention_mask", None),  # given, as None
        ("out = bert(ids)", "padding_mask", None),  # which sense the mask has is not said
    ],
)
def test_the_mask_is_given_where_the_model_is_called(
    tmp_path: Path, line: str, param: str, after: str | None
) -> None:
    path = _file(tmp_path, line + "\n")
    name = line.split("(")[0].split("=")[1].strip()
    meta = RunMeta(forward_at=_at(path, 1, model=name), lengths={"pad_id": 0})
    details = {"seen": "inputs", "mask_param": param, "pads": "padding_idx 0", "padding_ratio": 0.4}
    edit = edit_for([_finding("padding_leak", details)], meta)
    assert _after(edit) == ([after] if after else None)


SIGN = """
for step in range(10):
    rec, kl = f(x)
    loss = rec - beta * kl
    opt.zero_grad()
    loss.backward()
"""


@pytest.mark.parametrize(
    ("node", "after"), [("SubBackward0", "    loss = rec + beta * kl"), ("MeanBackward0", None)]
)
def test_the_subtracted_term_of_an_unbounded_loss_is_added(
    tmp_path: Path, node: str, after: str | None
) -> None:
    path = _file(tmp_path, SIGN)
    meta = RunMeta(loss_fn={"node": node, "at": _at(path, 5, loss="loss")})
    edit = edit_for([_finding("loss_unbounded")], meta)
    assert _after(edit) == ([after] if after else None)
    assert edit is None or (edit.line == 3 and edit.objective)


@pytest.mark.parametrize(
    ("line", "details", "model", "after"),
    [
        (
            "opt = torch.optim.Adam(net.head.parameters(), lr=1e-3)",
            {"left_out": True},
            "net",
            "opt = torch.optim.Adam(net.parameters(), lr=1e-3)",
        ),
        (
            "opt = Adam(net.body.head.parameters())",
            {"left_out": True},
            None,
            "opt = Adam(net.parameters())",
        ),
        ("opt = Adam(head.parameters())", {"left_out": True}, "net", None),  # not an attribute
        ("opt = Adam(other.head.parameters())", {"left_out": True}, "net", None),  # not the model
        ("opt = Adam(net.head.parameters())", {"left_out": False}, "net", None),  # never a grad
        ("opt = Adam(g.parameters())", {"left_out": True, "models": ["g"]}, "g", None),
    ],
)
def test_the_optimizer_is_given_the_whole_model_where_it_is_made(
    tmp_path: Path, line: str, details: dict[str, Any], model: str | None, after: str | None
) -> None:
    path = _file(tmp_path, line + "\n")
    forward = {"file": str(path), "line": 99, "code": "", "model": model}
    meta = RunMeta(optimizers=[{"type": "Adam", "at": _at(path, 1)}], forward_at=forward)
    edit = edit_for([_finding("frozen_parameters", details)], meta)
    assert _after(edit) == ([after] if after else None)


def test_a_python_number_denominator_is_floored_with_max(tmp_path: Path) -> None:
    path = _file(tmp_path, "rel = pos / span\n")
    evidence = [Reading(NUMBER_DENOMINATOR, 0)]
    origin = Origin(
        phase="forward",
        step=3,
        op="aten.div.Tensor",
        file=str(path),
        line=1,
        code="rel = pos / span",
    )
    plain = _finding("nonfinite", origin=origin)
    assert _after(edit_for([plain])) == ["rel = pos / span.clamp_min(1e-6)"]
    origin.evidence = evidence
    assert _after(edit_for([_finding("nonfinite", origin=origin)])) == [
        "rel = pos / max(span, 1e-6)"
    ]


def test_a_clamp_far_from_the_values_seen_is_refused_with_why(tmp_path: Path) -> None:
    """A divisor of 0 whose other values were 0.5 and more: a floor of 1e-6 would make the
    quotient there 500,000x anything the program computed, so no clamp is written and the
    reason is said; where its smallest non-zero value was near the floor, the clamp is."""
    from gradoc.detect.finding import Mechanism

    path = _file(tmp_path, "rel = err / scale\n")

    def origin(smallest: float) -> Origin:
        read = [Reading("divisor values of exactly 0", 3)]
        read.append(Reading("smallest non-zero |divisor|", smallest))
        m = Mechanism("zero", "zero_divisor", "the divisor was exactly 0", "no idiom", read)
        return Origin(
            phase="forward", step=0, op="aten.div.Tensor", file=str(path), line=1,
            code="rel = err / scale", mechanism=m,
        )  # fmt: skip

    why: list[str] = []
    assert edit_for([_finding("nonfinite", origin=origin(0.5))], why=why) is None
    assert "would move the result where it was 0 5e+05x past anything" in why[0]
    near = edit_for([_finding("nonfinite", origin=origin(1e-4))])
    assert _after(near) == ["rel = err / scale.clamp_min(1e-6)"]


def test_the_working_copy_leaves_out_sockets_and_other_copies(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("print(1)\n")
    (project / "gradoc-copy-old").mkdir()
    (project / "gradoc-copy-old" / "big.bin").write_text("x")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(project / "listener"))  # a socket: copytree would fail on it
    try:
        with working_copy(project / "train.py", project) as copied:
            names = sorted(os.listdir(copied.dest))
    finally:
        listener.close()
    assert names == ["train.py"]


def test_the_copy_links_what_the_first_run_read_above_its_folder_and_never_writes_it(
    tmp_path: Path,
) -> None:
    """A char-RNN in ``project/char_rnn`` reads ``../data/names/*.txt``: in the copy the same
    relative paths reach the user's files by links (not copies), a glob there finds every
    file of that folder, a write to one fails, and a new file lands in the copy only."""
    project, data = tmp_path / "project" / "char_rnn", tmp_path / "project" / "data" / "names"
    project.mkdir(parents=True)
    data.mkdir(parents=True)
    (project / "train.py").write_text("print(1)\n")
    for name in ("Arabic.txt", "Czech.txt"):
        (data / name).write_text(name)
    before = sorted(p.name for p in data.iterdir())
    with working_copy(project / "train.py", project, reads=[data / "Arabic.txt"]) as copied:
        assert copied.dest.name == "char_rnn" and copied.dest.parent.name == "project"
        read = Path("../data/names/Arabic.txt")
        assert read.read_text() == "Arabic.txt" and read.is_symlink()
        assert sorted(p.name for p in Path("../data/names").glob("*.txt")) == before
        with pytest.raises(PermissionError, match="linked read-only"):
            Path("../data/names/Czech.txt").write_text("changed")
        with pytest.raises(PermissionError):
            os.truncate("../data/names/Arabic.txt", 0)
        Path("../data/names/new.txt").write_text("the copy's own")
    assert sorted(p.name for p in data.iterdir()) == before  # nothing new where the user's are
    assert (data / "Czech.txt").read_text() == "Czech.txt"
    assert (data / "Arabic.txt").read_text() == "Arabic.txt"
    Path(data / "Czech.txt").write_text("the user may")  # read-only only while the copy runs


def test_a_copy_that_fails_says_so_in_a_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``shutil.Error`` lists every file that failed (a folder of sockets listed 14 MB of
    them): the refusal names the first and counts the rest."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("print(1)\n")
    failed = [
        (f"/p/f{i}", f"/q/f{i}", f"[Errno 13] Permission denied: '/p/f{i}'") for i in range(5)
    ]

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise shutil.Error(failed)

    monkeypatch.setattr(shutil, "copytree", refuse)
    with pytest.raises(CopyRefused) as refused, working_copy(project / "train.py", project):
        pass
    assert str(refused.value).endswith("Permission denied: '/p/f0' (and 4 more)")


@pytest.mark.parametrize(
    ("line", "after"),
    [
        (
            "opt = torch.optim.AdamW(net.parameters(), lr=3e-3, eps=args.eps)",
            "opt = torch.optim.AdamW(net.parameters(), lr=3e-3, eps=1e-15)",
        ),
        (  # left at its default: given
            "opt = Adam(net.parameters(), lr=1e-3,)",
            "opt = Adam(net.parameters(), lr=1e-3, eps=1e-15)",
        ),
        ("opt = Adam(ps, 1e-3, (0.9, 0.99), 1e-8)", None),  # by position: the fourth argument
        ("a, b = Adam(ps, lr=1e-3), SGD(qs, lr=0.1)", None),  # two optimizers on the line
    ],
)
def test_adams_epsilon_is_set_small_where_the_optimizer_is_made(
    tmp_path: Path, line: str, after: str | None
) -> None:
    path = _file(tmp_path, line + "\n")
    meta = RunMeta(optimizers=[{"type": "AdamW", "eps": 1e-8, "at": _at(path, 1)}])
    edit = edit_for([_finding("adam_epsilon")], meta, [path])
    assert _after(edit) == ([after] if after else None)


def test_a_python_length_minus_one_is_floored_with_max(tmp_path: Path) -> None:
    """``log(10000) / (half - 1)`` with ``half`` a Python int of 1: no tensor method to call,
    so the divisor is ``max(half - 1, 1)``."""
    from gradoc.detect.finding import Mechanism
    from gradoc.locate.mechanism import PYTHON_DIVISOR

    line = "emb = math.log(10000.0) / (half - 1)"
    path = _file(tmp_path, line + "\n")
    said = [Reading(PYTHON_DIVISOR, 0)]
    m = Mechanism("zero", "zero_length", "the divisor, a Python number, was 0", "max", said)
    origin = Origin(
        phase="forward", step=0, op="aten.div.Tensor", file=str(path), line=1, code=line,
        mechanism=m,
    )  # fmt: skip
    edit = edit_for([_finding("nonfinite", origin=origin)])
    assert _after(edit) == ["emb = math.log(10000.0) / (max(half - 1, 1))"]


def test_a_second_script_run_in_the_same_process_imports_its_own_modules(tmp_path: Path) -> None:
    """``gradoc fix`` re-runs each fix in its own copy, in one process: a module of the
    script's folder imported by one copy's run is not the one the next copy's run gets."""
    from gradoc.runtime.runner import exec_script

    seen = []
    for n, value in enumerate(("first", "second")):
        folder = tmp_path / f"copy{n}"
        folder.mkdir()
        (folder / "helper_mod_for_test.py").write_text(f"VALUE = {value!r}\n")
        out = folder / "seen.txt"
        script = folder / "train.py"
        write = f"open({str(out)!r}, 'w').write(helper_mod_for_test.VALUE)"
        script.write_text(f"import helper_mod_for_test\n{write}\n")
        assert exec_script(script, [], forget=True) == 0
        seen.append(out.read_text())
    assert seen == ["first", "second"]


def test_a_weight_multiplied_after_its_init_loses_the_line_unless_it_is_alone(
    tmp_path: Path,
) -> None:
    """``w.data *= 10`` after the init: its line removed, comment and all; where it is the only
    statement of its block, removing it would break the code, and there is no edit."""
    from gradoc.fix.made import init_scaled
    from gradoc.fix.patch import Seen

    head = "import torch\nnet = torch.nn.Linear(4, 4)\n"
    path = _file(tmp_path, head + 'net.weight.data *= 10  # "sharper"\nprint(net)\n')
    f = _finding("poor_initialization", {})
    edit = init_scaled(f, Seen(RunMeta(), (path,)))
    assert edit is not None and edit.after == ()
    assert edit.before == 'net.weight.data *= 10  # "sharper"'
    alone = _file(tmp_path, head + "if True:\n    net.weight.data *= 10\n", "alone.py")
    why: list[str] = []
    assert init_scaled(f, Seen(RunMeta(), (alone,), why)) is None
    assert why and "no init in your files" in why[0]


def test_two_edits_of_one_file_are_merged_only_where_they_do_not_overlap(tmp_path: Path) -> None:
    from gradoc.fix.edit import Edit, merged

    path = _file(tmp_path, "a = 1\nb = 2\nc = 3\nd = 4\n")
    one = Edit("x", str(path), 1, "a = 1", ("a = 10",), "a")
    three = Edit("y", str(path), 3, "c = 3", ("c = 30", "e = 5"), "c", objective=True)
    both = merged(three, one)
    assert both is not None and (both.line, both.end) == (1, 3)
    assert both.after == ("a = 10", "b = 2", "c = 30", "e = 5") and both.objective
    assert both.action == "a; and c"
    over = Edit("z", str(path), 1, "a = 1\nb = 2", ("ab = 3",), "ab", end=2)
    assert merged(over, Edit("w", str(path), 2, "b = 2", ("b = 20",), "b")) is None
    other = _file(tmp_path, "a = 1\n", "other.py")
    assert merged(one, Edit("v", str(other), 1, "a = 1", ("a = 2",), "v")) is None
