"""Every docstring example in the package runs, and shows what it says it shows."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

import gradoc

ROOT = Path(gradoc.__file__).parent
MODULES = sorted(
    "gradoc." + ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    for p in ROOT.rglob("*.py")
    if ">>>" in p.read_text()
)
OPTIONAL = {"gradoc.integrations.hf": "transformers", "gradoc.integrations.lightning": "lightning"}


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if name in OPTIONAL:
        pytest.importorskip(OPTIONAL[name])
    monkeypatch.chdir(tmp_path)  # an example that writes writes here
    module = importlib.import_module(name.removesuffix(".__init__") if name != "gradoc" else name)
    result = doctest.testmod(
        module, extraglobs={"tmp_path": tmp_path}, optionflags=doctest.ELLIPSIS, verbose=False
    )
    assert result.attempted > 0, f"{name}: no example ran"
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"


def test_no_example_is_skipped() -> None:
    skipped = [
        str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py") if "doctest: +SKIP" in p.read_text()
    ]
    assert not skipped, f"examples skipped instead of run: {skipped}"
