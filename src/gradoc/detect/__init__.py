"""detect: what the rules of every finding kind read and write.

A run log's history as the rules read it (``history.py``), the typed records a finding is
made of (``finding.py``), and the signals rules and diagnoses share (``signals.py``): pure
functions of the recorded series. The rules themselves, one class per finding kind, are
``gradoc.findings``; the guard's clipping rule is ``zclip.py``.
"""

from __future__ import annotations

from .finding import Finding
from .history import History, synthetic

__all__ = ["Finding", "History", "synthetic"]
