"""Built-in scenarios: ``gradoc demo [SCENARIO] [--fixed]``, ``gradoc demo --list``.

The flagship (no argument) is :mod:`.nan_posenc`; the gallery (:mod:`.gallery`) pairs
each classic pathology with its fix.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from . import nan_posenc
from .gallery import GALLERY

DEFAULT = nan_posenc.NAME


def titles() -> dict[str, str]:
    return {nan_posenc.NAME: nan_posenc.TITLE} | {k: s.title for k, s in GALLERY.items()}


def main(
    name: str | None = None,
    *,
    list_only: bool = False,
    out: str | None = None,
    fixed: bool = False,
) -> int:
    if list_only:
        for key, title in titles().items():
            flag = "  (the default)" if key == DEFAULT else ""
            print(f"{key:<18} {title}{flag}")
        return 0
    key = name or DEFAULT
    path = Path(out) if out else None
    if key == DEFAULT:
        return nan_posenc.run(path, fixed=fixed)
    if key not in GALLERY:
        raise UsageError(f"unknown scenario {key!r}; `gradoc demo --list` shows them")
    from .gallery import run

    return run(key, path, fixed=fixed)
