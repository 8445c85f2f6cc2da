"""The shape of JSON at gradoc's file boundaries."""

from __future__ import annotations

from typing import Any, TypeAlias

JsonObject: TypeAlias = dict[str, Any]
"""A JSON object as it stands in a file gradoc writes or reads (a run log's values and
events, report.json, fix.json): the boundary's shape. Typed records turn into one at their
``to_json`` and back at their ``from_json``; nothing between the two passes one around."""
