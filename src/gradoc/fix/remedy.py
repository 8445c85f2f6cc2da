"""Which fix to try: the first applicable fix of the most serious finding."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .._util.json_types import JsonObject
from ..analysis import Report
from ..config import GuardConfig
from ..detect.finding import CodeLine, Finding


@dataclass(frozen=True, slots=True)
class Remedy:
    """A fix gradoc applies itself on a re-run: ``lr_scale``, ``clip`` or ``skip_nonfinite``;
    or one made in the command's own flags (``lr_flags``, ``clip_flags``)."""

    kind: str
    value: Any
    finding: str
    """The kind of the finding it answers."""
    action: str
    """The fix as the diagnosis states it."""

    @property
    def lr_scale(self) -> float:
        return float(self.value) if self.kind == "lr_scale" else 1.0

    @property
    def guard(self) -> GuardConfig | None:
        """Only what the fix asks for, so the re-run differs from the first run by it alone."""
        if self.kind == "clip":
            return GuardConfig(clip=self.value, rollback=False)
        if self.kind == "skip_nonfinite":
            return GuardConfig(clip=None)  # skip, and roll back when skips repeat
        return None

    def describe(self) -> str:
        if self.kind == "lr_scale":
            what = f"learning rate x{self.value:g}"
        elif self.kind == "lr_flags":
            what = f"the learning-rate flags x{self.value:g} ({self.action})"
        elif self.kind == "clip_flags":
            what = f"the gradient-clip flags set to {self.value:g} ({self.action})"
        elif self.kind == "clip":
            what = (
                "adaptive gradient clipping (ZClip)"
                if self.value == "zclip"
                else (f"gradient clipping at global norm {self.value:g}")
            )
        else:
            what = "skip non-finite steps (roll back when they repeat)"
        return f"{what}, for {self.finding}"

    def to_json(self) -> JsonObject:
        return {**asdict(self), "describe": self.describe()}


@dataclass(frozen=True, slots=True)
class CodeFix:
    """A fix that needs the user's code changed, and where."""

    finding: str
    action: str
    layer: str | None
    file: str | None
    line: int | None
    code: str | None

    def to_json(self) -> JsonObject:
        return asdict(self)


def choose(report: Report) -> Remedy | None:
    """The first fix with an ``apply`` of the first (most serious) finding that has one."""
    return next((r for f in report.serious for r in remedies(f)), None)


def remedies(finding: Finding) -> list[Remedy]:
    """The fixes of ``finding`` that gradoc applies without a code change, in its order."""
    out = []
    for fix in finding.fixes:
        if fix.apply:
            (kind, value), *_ = fix.apply.items()
            out.append(Remedy(kind, value, finding.kind, fix.action))
    return out


def code_fixes(report: Report, sources: list[Path]) -> list[CodeFix]:
    """For each serious finding, its first fix that needs a code change, located: the line
    the diagnosis names (a NaN's origin), else where the layer is defined in ``sources``."""
    out = []
    for f in report.serious:
        fix = next((x for x in f.fixes if not x.apply), None)
        if fix is None:
            continue
        where = fix.code
        if where is None and f.layer:
            where = find_definition(f.layer, sources)
        out.append(
            CodeFix(
                f.kind,
                fix.action,
                f.layer,
                where.file if where else None,
                where.line if where else None,
                where.code if where else None,
            )
        )
    return out


def find_definition(layer: str, sources: list[Path]) -> CodeLine | None:
    """The line that creates ``layer`` (``self.fc1 = ...``, ``fc1 = ...``; for ``net.0`` the
    line that creates ``net``), searched in the user's source files."""
    parts = [p for p in layer.split(".") if not p.isdigit()]
    if not parts:
        return None
    pattern = re.compile(rf"(^|[\s.]){re.escape(parts[-1])}\s*(:[^=]*)?=[^=]")
    for path in sources:
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for i, text in enumerate(lines, 1):
            if pattern.search(text):
                return CodeLine(str(path), i, text.strip())
    return None


def user_sources(script: Path, limit: int = 50) -> list[Path]:
    """The script, then the other Python files next to it (a model usually lives there)."""
    script = script.resolve()
    base = script if script.is_dir() else script.parent
    others = sorted(p for p in base.glob("*.py") if p != script)[:limit]
    return ([script] if script.is_file() else []) + others


_LR_NAME = re.compile(r"(?:^|[._-])(?:lr|learning[_-]rate)$", re.IGNORECASE)
"""A flag that sets a learning rate or a bound of its schedule: ``--lr``, ``--min_lr``,
``--learning-rate``, ``--trainer.learning_rate`` (not ``--lr_decay_iters``)."""


def scaled_lr_flags(args: list[str], factor: float) -> tuple[list[str], list[str]] | None:
    """``args`` with every learning-rate flag's number scaled by ``factor`` (``--lr 0.1``,
    ``--learning_rate=0.1``), and the flags as changed; None when no flag sets one. A program
    that sets its rate each step from its flags (nanoGPT's own schedule) keeps no other
    place a scale can reach."""
    return _set_flags(args, _LR_NAME.search, lambda number: f"{number * factor:.3g}")


_CLIP_NAMES = frozenset(
    {
        "clip",
        "grad_clip",
        "clip_grad",
        "clip_grad_norm",
        "clip_norm",
        "max_grad_norm",
        "grad_norm_clip",
        "gradient_clip_val",
        "gradient_clipping",
    }
)
"""Flags that set a gradient clip's threshold: ``--clip``, ``--max_grad_norm``,
``--trainer.grad_norm_clip``, ``--gradient-clip-val``."""

CLIP_DEFAULT = 1.0
"""The threshold a clip flag is set to when the run gave no healthy step to learn one from
(gradoc's own clip would be ZClip, which a flag cannot say)."""


def flag_clip(to: float | str) -> float:
    """The threshold a clip flag is set to for gradoc's clip ``to``: its number, or
    :data:`CLIP_DEFAULT` for ZClip."""
    return float(to) if isinstance(to, (int, float)) else CLIP_DEFAULT


def clip_flags(args: list[str], to: float) -> tuple[list[str], list[str]] | None:
    """``args`` with every gradient-clip flag set to ``to``, and the flags as changed; None
    when no flag sets one. The program's own clip reaches a hand-written update
    (``p.data.add_(p.grad, alpha=-lr)``), which gradoc's clip, made at the optimizer's step,
    does not."""

    def named(flag: str) -> bool:
        return flag.rsplit(".", 1)[-1].replace("-", "_").lower() in _CLIP_NAMES

    return _set_flags(args, named, lambda number: f"{to:.3g}")


def _set_flags(
    args: list[str], named: Callable[[str], Any], new: Callable[[float], str]
) -> tuple[list[str], list[str]] | None:
    """``args`` with the number of every flag ``named`` accepts replaced by ``new(number)``
    (``--flag 0.1`` and ``--flag=0.1``), and the flags as changed; None when none was."""
    out, changed = list(args), []
    for i, token in enumerate(args):
        if not token.startswith("-"):
            continue
        name, eq, value = token.partition("=")
        if not named(name.lstrip("-")):
            continue
        at = i if eq else i + 1
        text = value if eq else (args[at] if at < len(args) else "")
        try:
            number = float(text)
        except ValueError:
            continue
        replaced = new(number)
        out[at] = f"{name}={replaced}" if eq else replaced
        changed.append(f"{name}={replaced}" if eq else f"{name} {replaced}")
    return (out, changed) if changed else None
