"""Repairs written where the cause is, in programs shaped as real ones are (issue 60).

``tests/repairs/`` holds programs of our own, each with one bug whose fix belongs somewhere the
run did not locate: a collator (a class's ``__call__`` returning ``dict(...)``) that pads and
returns no mask, labels copied from the ids in a dataset's ``__getitem__``, a model frozen by
``requires_grad_(False)`` before its head is unfrozen, weights drawn from N(0, 1), a VAE's KL
term written with its sign flipped on a line of its own, a hand-written update whose rate's
flag defaults 100x too high, a causal mask built by ``tril`` and compared the wrong way
(``!= 0``) (``(1 + lv - mu**2 - lv.exp()).sum(1)
.mean() * 0.5``). Each runs
under ``gradoc run``; ``gradoc fix --write`` writes the edit where the cause is, verifies it by
a re-run, and leaves the file exactly as the diff it showed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.test_cli import gradoc_cli

PROGRAMS = Path(__file__).parent / "repairs"

CASES: dict[str, tuple[str, str, str]] = {
    # program: (the finding fixed, the line before, the lines after; "" where it is removed)
    "collator_mask.py": (
        "padding_leak",
        "        return dict(\n",
        "        batch = dict(\n",
    ),
    "labels_from_ids.py": (
        "loss_includes_padding",
        '"labels": ids.clone()}',
        '"labels": ids.masked_fill(ids == PAD, -100)}',
    ),
    "freeze_named.py": (
        "frozen_parameters",
        "net.requires_grad_(False)  # fine-tune the head only\n",
        "",
    ),
    "vae_kl_sign.py": (
        "loss_unbounded",
        "sum(1).mean() * 0.5",
        "sum(1).mean() * -0.5",
    ),
    "causal_ne.py": (
        "nonfinite",
        "self.causal[:, :, :t, :t] != 0,",
        "self.causal[:, :, :t, :t] == 0,",
    ),
    "manual_sgd_flag.py": ("loss_blowup", "default=8.0,", "default=0.08,"),
    "init_wide.py": (
        "poor_initialization",
        "nn.init.normal_(m.weight, 0.0, 1.0)",
        "nn.init.normal_(m.weight, 0.0, m.weight[0].numel() ** -0.5)",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_cause_is_repaired_where_it_is_written(name: str, tmp_path: Path) -> None:
    kind, old, new = CASES[name]
    shutil.copy(PROGRAMS / name, tmp_path)
    done = gradoc_cli("run", "--out", "run", name, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert kind in {f["kind"] for f in report["findings"] if f["severity"] != "info"}

    fixed = gradoc_cli("fix", "--write", "--json", "fix.json", "run", name, cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    result = json.loads((tmp_path / "fix.json").read_text())
    assert result["verdict"] == "verified", result.get("why_not")
    assert result["patch"]["finding"] == kind
    original = (PROGRAMS / name).read_text()
    assert original.count(old) == 1
    written = (tmp_path / name).read_text()
    if name == "collator_mask.py":  # the dict named, the mask added, the name returned
        expected = original.replace(old, new).replace(
            "        )\n\n\ndef word",
            '        )\n        batch["attention_mask"] = (batch["input_ids"] != PAD).long()\n'
            "        return batch\n\n\ndef word",
        )
    else:
        expected = original.replace(old, new)
    assert written == expected  # --write made exactly the edit, nothing more
    assert (tmp_path / "run-fixed" / "report.json").is_file()


def test_a_shape_with_no_edit_says_why(tmp_path: Path) -> None:
    """Two functions that return a batch's dict without a mask: which one the model is fed,
    the files do not say; gradoc writes no edit, says so and exits 1."""
    text = (PROGRAMS / "collator_mask.py").read_text()
    twin = text.replace(
        "def word(g):",
        "def other_batch(pairs):\n"
        '    return {"input_ids": torch.zeros(2, 3, dtype=torch.long)}\n\n\ndef word(g):',
    )
    (tmp_path / "collator_mask.py").write_text(twin)
    done = gradoc_cli("run", "--out", "run", "collator_mask.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    fixed = gradoc_cli("fix", "run", "collator_mask.py", cwd=tmp_path)
    said = " ".join(fixed.stderr.split())
    assert "2 functions return a batch's dict with input_ids" in said, said
    assert fixed.returncode == 1
    assert (tmp_path / "collator_mask.py").read_text() == twin


def test_a_mask_and_pad_labels_are_made_together_and_said_so(tmp_path: Path) -> None:
    """A collator that pads ids and targets with the pad token and returns no mask: the mask
    alone is verified for ``padding_leak`` but leaves ``loss_includes_padding``; its edit (the
    targets padded with -100) is made with the first, once, verified, said as two fixes
    together, and ``--write`` makes exactly both."""
    name = "mask_and_labels.py"
    shutil.copy(PROGRAMS / name, tmp_path)
    assert gradoc_cli("run", "--out", "run", name, cwd=tmp_path).returncode == 0
    fixed = gradoc_cli("fix", "--write", "--json", "fix.json", "run", name, cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    result = json.loads((tmp_path / "fix.json").read_text())
    assert result["verdict"] == "verified" and result["together"].startswith("two fixes")
    assert {f["kind"] for f in result["disappeared"]} >= {"padding_leak", "loss_includes_padding"}
    original = (PROGRAMS / name).read_text()
    expected = original.replace(
        "targets = pad_sequence(rows, batch_first=True, padding_value=PAD)",
        "targets = pad_sequence(rows, batch_first=True, padding_value=-100)",
    ).replace(
        '        return {"input_ids": ids, "labels": targets}\n',
        '        batch = {"input_ids": ids, "labels": targets}\n'
        '        batch["attention_mask"] = (batch["input_ids"] != 0).long()\n'
        "        return batch\n",
    )
    assert (tmp_path / name).read_text() == expected
