"""A griffe extension for the API pages: gradoc's docstrings are written for ``help()``
and doctest (reST roles, ``>>>`` examples); in the site the roles become code and the
examples code blocks."""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:func|class|meth|mod|data|attr|exc|obj):`~?([^`]+)`")


def markdown(text: str) -> str:
    """Docstring text as Markdown: roles as code, each ``>>>`` example fenced."""
    text = ROLE.sub(r"`\1`", text)
    out: list[str] = []
    in_example = False
    for line in text.split("\n"):
        if line.startswith(">>>") and not in_example:
            out += ["```pycon", line]
            in_example = True
        elif in_example and not line.strip():
            out += ["```", line]
            in_example = False
        else:
            out.append(line)
    if in_example:
        out.append("```")
    return "\n".join(out)


class RestToMarkdown(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
