"""The run log: one SQLite database per run directory, the seam between collection and
everything that reads a run (detectors, reports, the CLI, users with ``sqlite3``)."""

from .._util.json_types import JsonObject
from .meta import RunMeta
from .reader import ActivationSeries, Layer, ParamDict, ParamSeries, RunLog, Series, open_run
from .schema import RAW_SOURCES, SCHEMA_VERSION, EventKind, Source
from .writer import RunWriter, Stopped

__all__ = [
    "RAW_SOURCES",
    "SCHEMA_VERSION",
    "ActivationSeries",
    "EventKind",
    "JsonObject",
    "Layer",
    "ParamDict",
    "ParamSeries",
    "RunLog",
    "RunMeta",
    "RunWriter",
    "Series",
    "Source",
    "Stopped",
    "open_run",
]
