"""A run and a run log in Jupyter: their report, inline.

Evaluating a :class:`~gradoc.collect.Run` (closed) or a :class:`~gradoc.store.RunLog` in a
notebook cell shows the page of ``report.html`` (the diagnosis and the charts), built from
the run log as ``gradoc report`` builds it, in an iframe: the page keeps its own styles
and the notebook's stay out of it. A run still training shows its status instead. The
renderers are registered for those classes (``_util/display.py``) when this module is
imported, which ``import gradoc`` does.
"""

from __future__ import annotations

import html

from .._util.display import register
from .._util.text import number
from ..analysis import analyze
from ..collect import Run
from ..collect.probes import status_html
from ..store import RunLog, open_run
from .html import render

HEIGHT_PX = 720


def framed(page: str, title: str) -> str:
    """A whole HTML page as one notebook output: an iframe that holds it (``srcdoc``)."""
    page = page.encode("utf-8", "replace").decode("utf-8")  # lone surrogates from odd paths
    return (
        f'<iframe class="gradoc-report" title="{html.escape(title)}" '
        f'srcdoc="{html.escape(page, quote=True)}" '
        f'style="width: 100%; height: {HEIGHT_PX}px; border: 1px solid #d0d7de"></iframe>'
    )


def log_html(log: RunLog) -> str:
    """A run log's report, as ``gradoc report RUN_DIR --html`` writes it, inline."""
    return framed(render(log, analyze(log)), f"gradoc report of {log.dir.name}")


def run_html(run: Run) -> str:
    """A closed run's report; a run still training says how far it got."""
    if run.closed:
        with open_run(run.dir) as log:
            return log_html(log)
    line = (
        f"gradoc · {run.dir.name} · training: step {number(run.step)} · the report shows "
        "here once the run closes (the end of the with block, or run.close())"
    )
    return status_html(line)


register(Run, run_html)
register(RunLog, log_html)
