"""fix: apply the diagnosis's top fix that needs no code change, re-run, compare.

``gradoc run --fix SCRIPT`` and ``gradoc fix RUN_DIR SCRIPT``: the remedy (a learning-rate
scale, gradient clipping, skipping non-finite steps) is applied by gradoc itself on the
re-run; fixes that need a code change are stated with the file and line to change.
"""

from .compare import compare
from .remedy import CodeFix, Remedy, choose, code_fixes

__all__ = ["CodeFix", "Remedy", "choose", "code_fixes", "compare"]
