"""A code fix written as an edit of the user's source, at the line the run located.

A finding kind whose fix is a code change may have a writer here (:data:`WRITERS`): from the
run's own evidence (the line it located, as the run read it) it writes an :class:`Edit`, the
line's replacement, or None where no safe edit can be written (the fix then stays prose). An
edit is checked against the file before it is applied anywhere: the line must still read as
the run saw it, or the edit is refused whole (:class:`EditFailed`), never half applied.

Writers parse the located line with :mod:`ast` and change one expression in it, so that
what they write is what a person would write there:

- ``zero_clip``: the clip call (``clip_grad_norm_(params, 0.0)``) given the usual threshold,
  1.0, where it was the literal 0; where the threshold is an expression (``args.clip``, a
  config's 0 meant as "off"), the call is skipped while it is not positive.
- ``accumulating_gradients``: ``<optimizer>.zero_grad()`` after the line that steps the
  optimizer (``meta.grads_kept.at``: the line and the variable holding it there).
- a finding whose fix scales the learning rate: the rate where the optimizer is constructed,
  scaled by the same factor (``lr=0.5`` -> ``lr=0.05``).
- ``nonfinite``: at the line where the NaN/Inf was born, the unsafe operand of its op (a
  division's denominator, a log's or a square root's argument, the base of a power below 1)
  clamped to ``1e-6``, where the line holds exactly one such operand.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from .._util.json_types import JsonObject
from ..detect.finding import CodeLine, Finding
from ..errors import GradocError


class EditFailed(GradocError):
    """An edit that cannot be applied as shown (the file changed since the run)."""


@dataclass(frozen=True, slots=True)
class Edit:
    """One line of the user's code replaced by ``after`` (one line or more)."""

    finding: str
    """The kind of the finding it answers."""
    file: str
    line: int
    before: str
    """The line as the run read it (its indentation included)."""
    after: tuple[str, ...]
    action: str
    """What the edit does, in words."""
    remedy: str | None = None
    """The no-code remedy this edit writes into the code (``lr_scale``), if it is one."""

    def describe(self) -> str:
        return f"{self.action} ({Path(self.file).name}:{self.line}), for {self.finding}"

    def diff(self, path: Path | None = None) -> str:
        """The unified diff of the edit, against ``path`` (default: the file itself)."""
        lines = _lines(path or Path(self.file))
        new = self.applied(lines)
        name = self.file
        return "".join(difflib.unified_diff(lines, new, f"a/{name}", f"b/{name}", n=2))

    def applied(self, lines: list[str]) -> list[str]:
        """``lines`` (of the file, with their ends) with the edit made; :class:`EditFailed`
        when the line no longer reads as the run saw it."""
        at = self.line - 1
        if not 0 <= at < len(lines) or lines[at].rstrip("\r\n") != self.before:
            raise EditFailed(
                f"{self.file}:{self.line} no longer reads as the run saw it "
                f"({self.before.strip()!r}); the edit was not applied"
            )
        end = lines[at][len(lines[at].rstrip("\r\n")) :] or "\n"
        return [*lines[:at], *(text + end for text in self.after), *lines[at + 1 :]]

    def apply(self, path: Path | None = None) -> None:
        """Make the edit in ``path`` (default: the file itself), all or nothing."""
        target = path or Path(self.file)
        new = self.applied(_lines(target))
        target.write_text("".join(new))

    def to_json(self) -> JsonObject:
        out = asdict(self)
        out["after"] = list(self.after)
        return out


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines(keepends=True)
    except OSError as exc:
        raise EditFailed(f"cannot read {path} to edit it: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Located:
    """A located line as the file holds it now, and parsed."""

    file: str
    line: int
    text: str
    """The line, its indentation included."""
    tree: ast.Module
    """The line's statements (``text`` without its indentation)."""

    @property
    def stripped(self) -> str:
        return self.text.strip()

    @property
    def indent(self) -> str:
        return self.text[: len(self.text) - len(self.text.lstrip())]

    def parts(self) -> tuple[str, int, str, ast.Module, str]:
        """(file, line, text, tree, stripped), for a writer to take apart at once."""
        return self.file, self.line, self.text, self.tree, self.stripped


def _located(code: CodeLine | None) -> Located | None:
    """The located line as the file holds it now, if it still reads as the run saw it and
    parses by itself (a statement over several lines does not)."""
    if code is None or code.line is None or not code.file:
        return None
    try:
        lines = Path(code.file).read_text().splitlines()
    except OSError:
        return None
    if not 0 < code.line <= len(lines):
        return None
    text = lines[code.line - 1]
    if code.code is not None and text.strip() != code.code.strip():
        return None
    try:
        tree = ast.parse(text.strip())
    except SyntaxError:
        return None
    return Located(code.file, code.line, text, tree)


def _fixed_at(f: Finding) -> Located | None:
    """The line a finding's fixes name (its first that names one)."""
    return _located(next((x.code for x in f.fixes if x.code is not None), None))


CLIPS = {"clip_grad_norm_": "max_norm", "clip_grad_value_": "clip_value"}
"""The clip functions and their threshold's keyword (the second argument)."""


def _zero_clip(f: Finding) -> Edit | None:
    where = _fixed_at(f)
    if where is None:
        return None
    file, line, text, tree, _ = where.parts()
    indent = where.indent
    calls = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and _name(n.func) in CLIPS and (len(n.args) > 1 or n.keywords)
    ]
    if len(calls) != 1:
        return None
    (call,) = calls
    keyword = CLIPS[_name(call.func)]
    arg = _second(call, keyword)
    if arg is None:
        return None
    stripped = where.stripped
    if isinstance(arg, ast.Constant) and arg.value == 0:
        new = _replaced(stripped, arg, "1.0")
        action = f"clip at {keyword} 1.0 instead of 0"
        return Edit(f.kind, file, line, text, (indent + new,), action)
    # a threshold read from somewhere: 0 meant "off", so the call is skipped at 0
    if not (isinstance(tree.body[0], ast.Expr) and tree.body[0].value is call):
        return None  # the call's result is used: skipping it would change more than the clip
    threshold = ast.get_source_segment(stripped, arg)
    return Edit(
        f.kind,
        file,
        line,
        text,
        (f"{indent}if {threshold} > 0:  # 0 means no clipping", f"{indent}    {stripped}"),
        f"skip the clip while {threshold} is not positive",
    )


def _name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _replaced(source: str, node: ast.expr, text: str) -> str:
    """``source`` (one line) with ``node``'s segment replaced by ``text`` (ast's offsets
    count UTF-8 bytes)."""
    raw, start, end = source.encode(), node.col_offset, node.end_col_offset
    assert end is not None
    return (raw[:start] + text.encode() + raw[end:]).decode()


def _zero_grad(f: Finding) -> Edit | None:
    """``optimizer.zero_grad()`` inserted after the line that steps the optimizer whose
    gradients were kept (right for a plain loop and for gradient accumulation alike): the
    variable is the one the run found holding it there, else the receiver of the line's only
    ``.step()`` call."""
    where = _fixed_at(f)
    if where is None:
        return None
    file, line, text, tree, _ = where.parts()
    simple = (ast.Expr, ast.Assign, ast.AnnAssign, ast.AugAssign)
    if not all(isinstance(node, simple) for node in tree.body):
        return None  # ``for ...: opt.step()``: the next line is not in the same block
    receivers = {
        ast.unparse(n.func.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "step"
    }
    if not receivers:
        return None  # not the line that steps: a zero_grad() after it could undo the update
    details = f.details if isinstance(f.details, dict) else f.details.to_json()
    name = details.get("optimizer")
    if not isinstance(name, str) or not name.isidentifier():
        if len(receivers) != 1:
            return None
        (name,) = receivers
    indent = where.indent
    added = f"{indent}{name}.zero_grad()  # the next backward() starts from no gradient"
    return Edit(f.kind, file, line, text, (text, added), f"clear {name}'s gradients after its step")


EPS = "1e-6"
"""The floor an unsafe operand is clamped to (a denominator, a log's or a root's argument)."""

_UNSAFE = {"div": "div", "log": "log", "log2": "log", "log10": "log", "sqrt": "root"}
_UNSAFE |= {"rsqrt": "root", "pow": "pow"}


def _op_family(op: str) -> str | None:
    """``aten.div.Tensor`` / ``DivBackward0`` -> "div"; "log", "root", "pow"; else None."""
    name = op.split(".")[1] if op.startswith("aten.") and op.count(".") >= 1 else op
    name = name.removesuffix("Backward0").removesuffix("Backward1").lower()
    return _UNSAFE.get(name)


def _operands(tree: ast.AST, family: str) -> list[ast.expr]:
    """The operands the unsafe ops of ``family`` on a line take (the denominator, the log's
    or root's argument, the base of a power below 1)."""
    found: list[ast.expr] = []
    for n in ast.walk(tree):
        if family == "div" and isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div):
            found.append(n.right)
        elif family == "pow" and isinstance(n, ast.BinOp) and isinstance(n.op, ast.Pow):
            if isinstance(n.right, (ast.Constant, ast.UnaryOp)):
                found.append(n.left)
        elif isinstance(n, ast.Call) and isinstance(n.func, (ast.Attribute, ast.Name)):
            name = _name(n.func)
            if _UNSAFE.get(name) != family:
                continue
            is_method = isinstance(n.func, ast.Attribute) and not n.args and family != "pow"
            is_method |= family == "pow" and isinstance(n.func, ast.Attribute) and len(n.args) == 1
            if is_method and isinstance(n.func, ast.Attribute):
                found.append(n.func.value)  # x.log(), x.pow(-0.5)
            elif n.args and family != "pow":
                found.append(n.args[0])  # torch.log(x)
    return found


def _nonfinite(f: Finding) -> Edit | None:
    """The unsafe operand of the op where the NaN/Inf was born, clamped to :data:`EPS`, at
    the line the run located: ``pos / span`` -> ``pos / span.clamp_min(1e-6)``."""
    origin = f.origin
    if origin is None or not origin.op or not origin.file or origin.line is None:
        return None
    family = _op_family(origin.op)
    where = _located(CodeLine(origin.file, origin.line, origin.code))
    if family is None or where is None:
        return None
    file, line, text, tree, stripped = where.parts()
    operands = [o for o in _operands(tree, family) if not isinstance(o, ast.Constant)]
    if len(operands) != 1:
        return None  # none, or several: which one, the line does not say
    (operand,) = operands
    seg = ast.get_source_segment(stripped, operand)
    if seg is None:
        return None
    simple = isinstance(operand, (ast.Name, ast.Attribute, ast.Call, ast.Subscript))
    clamped = f"{seg}.clamp_min({EPS})" if simple else f"({seg}).clamp_min({EPS})"
    indent = where.indent
    new = indent + _replaced(stripped, operand, clamped)
    return Edit(f.kind, file, line, text, (new,), f"clamp {seg} to at least {EPS}")


WRITERS: dict[str, Callable[[Finding], Edit | None]] = {
    "nonfinite": _nonfinite,
    "zero_clip": _zero_clip,
    "accumulating_gradients": _zero_grad,
}
"""The finding kinds whose code fix gradoc writes as an edit."""


def _lr_scaled(f: Finding, optimizers: Sequence[JsonObject]) -> Edit | None:
    """A finding whose fix scales the learning rate (``lr_scale``): the rate given where the
    program constructs its optimizer (``meta.optimizers[i].at``, seen by ``gradoc run``),
    scaled there: ``lr=0.5`` -> ``lr=0.05``, ``lr=args.lr`` -> ``lr=args.lr * 0.1``. Unlike
    the no-code remedy it reaches an optimizer that keeps its own copy of the rate."""
    factor = next((x.apply["lr_scale"] for x in f.fixes if x.apply and "lr_scale" in x.apply), None)
    at = next((CodeLine.from_json(o.get("at")) for o in optimizers if o.get("at")), None)
    where = _located(at)
    if not isinstance(factor, (int, float)) or where is None:
        return None
    file, line, text, tree, stripped = where.parts()
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _rate(n) is not None]
    if len(calls) != 1:
        return None
    rate = _rate(calls[0])
    assert rate is not None
    seg = ast.get_source_segment(stripped, rate)
    if isinstance(rate, ast.Constant) and isinstance(rate.value, (int, float)):
        new = f"{rate.value * factor:.3g}"
    elif seg is not None:
        simple = isinstance(rate, (ast.Name, ast.Attribute, ast.Subscript, ast.Call))
        new = f"{seg} * {factor:g}" if simple else f"({seg}) * {factor:g}"
    else:
        return None
    indent = where.indent
    return Edit(
        f.kind,
        file,
        line,
        text,
        (indent + _replaced(stripped, rate, new),),
        f"the learning rate x{factor:g} where the optimizer is made",
        remedy="lr_scale",
    )


def _rate(call: ast.Call) -> ast.expr | None:
    """The learning rate a ``torch.optim`` constructor call is given (``lr=`` or its second
    argument), None for any other call."""
    if not _name(call.func)[:1].isupper():
        return None  # optimizers are classes: SGD, AdamW, LBFGS
    return _second(call, "lr")


def _second(call: ast.Call, keyword: str) -> ast.expr | None:
    """A call's second argument, given by ``keyword`` or in its place (a clip's threshold, an
    optimizer's learning rate: both follow the parameters)."""
    given = next((k.value for k in call.keywords if k.arg == keyword), None)
    return given if given is not None else (call.args[1] if len(call.args) > 1 else None)


def edit_for(findings: list[Finding], optimizers: Sequence[JsonObject] = ()) -> Edit | None:
    """The edit for the most serious finding that has one written, else None
    (``optimizers``: the run log's ``meta.optimizers``, where they were constructed)."""
    for f in findings:
        writer = WRITERS.get(f.kind)
        edit = writer(f) if writer is not None else None
        edit = edit if edit is not None else _lr_scaled(f, optimizers)
        if edit is not None:
            return edit
    return None
