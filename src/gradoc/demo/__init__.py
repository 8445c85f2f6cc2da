"""Built-in scenarios: ``gradoc demo [SCENARIO]``."""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from . import nan_posenc

SCENARIOS = {nan_posenc.NAME: nan_posenc}
DEFAULT = nan_posenc.NAME


def main(name: str | None = None, *, list_only: bool = False, out: str | None = None) -> int:
    if list_only:
        for key, mod in SCENARIOS.items():
            print(f"{key:<16} {mod.TITLE}")
        return 0
    key = name or DEFAULT
    if key not in SCENARIOS:
        raise UsageError(f"unknown scenario {key!r}; `gradoc demo --list` shows them")
    return int(SCENARIOS[key].run(Path(out) if out else None))
