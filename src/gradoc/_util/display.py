"""How gradoc's objects show in Jupyter, decided by a higher layer.

A :class:`Run` (``collect``) and a :class:`RunLog` (``store``) show their report inline,
but the report is rendered two layers above them (``report``). They derive from
:class:`Shown`, whose ``_repr_html_`` asks the renderer registered for their class; the
report layer registers its renderers (``report/notebook.py``), so nothing here or below it
imports the report.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import entry

RENDERERS: dict[type, Callable[[Any], str]] = {}


def register(cls: type, render: Callable[[Any], str]) -> None:
    """Show instances of ``cls`` (and of its subclasses) in Jupyter as ``render(obj)``."""
    RENDERERS[cls] = render


class Shown:
    """An object that Jupyter shows as HTML once a renderer is registered for its class."""

    __slots__ = ()

    def _repr_html_(self) -> str | None:
        # Jupyter calls it: an entry point (``entry``), None when gradoc fails (repr() then)
        return entry.call(_render, self, where=_WHERE)  # type: ignore[no-any-return]


_WHERE = "_util.display.Shown._repr_html_"


def _render(obj: Any) -> str | None:
    for cls in type(obj).__mro__:
        if cls in RENDERERS:
            return RENDERERS[cls](obj)
    return None  # Jupyter falls back to repr()
