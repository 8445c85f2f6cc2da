"""``benchmarks/differential.py``: its comparison (what counts as the program's own noise and
what as gradoc's doing), and a fast slice of ``../shared/real-programs*`` run plain and under
``gradoc run``, the same stdout, files and exit code (skipped where the suites are not beside
the checkout and ``$GRADOC_SHARED`` does not name them)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "differential", ROOT / "benchmarks" / "differential.py"
)
assert _spec is not None and _spec.loader is not None
differential = importlib.util.module_from_spec(_spec)
sys.modules["differential"] = differential
_spec.loader.exec_module(differential)
Outcome = differential.Outcome

SLICE = ["regression_manual_sgd_healthy", "linreg_nan_record", "crf_healthy"]
"""Fast cases, one a suite: a manual-SGD loop, a NaN run that exits 0, the BiLSTM-CRF whose
loss comes from a method other than ``forward``."""


def out(stdout: str, files: dict[str, str] | None = None, code: int = 0) -> object:
    return Outcome(code, stdout.encode(), files or {}, 1.0)


def test_a_time_two_plain_runs_printed_alike_on_one_line_is_still_noise() -> None:
    plain = out("step 70 | loss 2.60 | time 7.11ms\nstep 80 | loss 2.53 | time 7.45ms\n")
    again = out("step 70 | loss 2.60 | time 8.02ms\nstep 80 | loss 2.53 | time 7.45ms\n")
    watched = out("step 70 | loss 2.60 | time 9.11ms\nstep 80 | loss 2.53 | time 21.5ms\n")
    assert differential.differences(plain, watched, again) == []


def test_a_loss_printed_differently_is_a_difference_beside_a_noisy_time() -> None:
    plain = out("step 70 | loss 2.60 | time 7.11ms\nstep 80 | loss 2.53 | time 7.45ms\n")
    again = out("step 70 | loss 2.60 | time 8.02ms\nstep 80 | loss 2.53 | time 7.45ms\n")
    watched = out("step 70 | loss 2.60 | time 9.11ms\nstep 80 | loss 2.54 | time 21.5ms\n")
    said = differential.differences(plain, watched, again)
    assert len(said) == 1 and said[0].startswith("stdout line 2")


def test_a_duration_is_the_programs_clock_even_where_two_plain_runs_agree() -> None:
    plain = out("1000 5% (0m 1s) 2.9609 Naser / German (Arabic)\n")
    watched = out("1000 5% (0m 2s) 2.9609 Naser / German (Arabic)\n")
    assert differential.differences(plain, watched, plain) == []
    wrong = out("1000 5% (0m 2s) 2.9610 Naser / German (Arabic)\n")
    assert differential.differences(plain, wrong, plain) != []


def test_without_a_second_plain_run_every_byte_counts() -> None:
    plain, watched = out("took 7.11\n"), out("took 7.12\n")
    assert differential.differences(plain, watched) == [
        "stdout line 1: b'took 7.12' (plain b'took 7.11')"
    ]


def test_exit_code_lines_and_files_are_compared() -> None:
    plain = out("a\n", {"model.pt": "1"}, code=0)
    watched = out("a\nb\n", {"model.pt": "2", "extra.txt": "3"}, code=1)
    said = differential.differences(plain, watched)
    assert said == [
        "exit 1 (plain 0)",
        "stdout: 2 lines (plain 1)",
        "file extra.txt: new",
        "file model.pt: differs",
    ]


def test_files_named_by_time_are_compared_by_their_names_shape() -> None:
    plain = out("", {"out/events.1796551665.vm.21275": "x"})
    again = out("", {"out/events.1796551670.vm.21290": "y"})
    same = out("", {"out/events.1796551700.vm.21300": "z"})
    two = out("", {"out/events.1796551700.vm.21300": "z", "out/events.1796551701.vm.21300": "w"})
    assert differential.differences(plain, same, again) == []
    assert differential.differences(plain, two, again)[0].startswith("files named like")


@pytest.mark.parametrize("name", SLICE)
def test_a_real_program_runs_under_gradoc_as_without_it(tmp_path: Path, name: str) -> None:
    cases = differential.real_cases([name]) if differential.SHARED.is_dir() else []
    if not cases:
        pytest.skip(f"{name}: not found under {differential.SHARED} (set GRADOC_SHARED)")
    said, _, _ = differential.compare(cases[0], tmp_path / "work", 300.0)
    assert said == [], f"{name} under gradoc run: {said}"
    ran = tmp_path / "work-run"  # the watched run's log and report
    assert (ran / "run.db").is_file() and (ran / "report.json").is_file()
