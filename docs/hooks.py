"""mkdocs hook: the findings reference is written from the code at every build
(``gradoc.report.reference``), so the site cannot drift from the registry of kinds."""

from __future__ import annotations

from typing import Any


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    from gradoc.report.reference import START, inserted

    return inserted(markdown) if START in markdown else markdown
