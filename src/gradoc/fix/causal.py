"""A causal mask that hides a whole row, repaired where it is written (mechanism ``masked_row``).

A softmax whose row of scores is -inf everywhere gives NaN. In a decoder that row comes from
its causal mask: the comparison inverted (``masked_fill(tril == 1, -inf)``, which hides the
past and the token itself, so the last row is all -inf) or the diagonal hidden too
(``triu(ones, diagonal=0)``, so the first row is). This reads the ``masked_fill`` that put
the -inf into the scores the located softmax took, and the ``tril``/``triu`` that built its
mask (in the same expression, or a buffer or attribute made in ``__init__``), works out which
positions the two together hide, and writes the smallest change that hides the future only
(position j of row i where j > i): the comparison turned round, the diagonal set, or both.

A mask that is not built from ``tril``/``triu`` in the file (a padding mask, a mask passed
in), or whose diagonal is not a number written there, gets no edit: the fix stays in words.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .source import name_of

if TYPE_CHECKING:
    from ..detect.finding import Origin
    from .source import Replace, Source

_FILLS = {"masked_fill", "masked_fill_"}


@dataclass(frozen=True, slots=True)
class Triangle:
    """A ``tril``/``triu`` call and the diagonal it is given."""

    call: ast.Call
    lower: bool
    """``tril``: ones at j - i <= diagonal; ``triu``: ones at j - i >= diagonal."""
    diagonal: int
    given: ast.expr | None
    """The diagonal's node where written (None: the default, 0)."""


def unmask(src: Source, origin: Origin) -> list[Replace]:
    """The changes that make the mask feeding the located softmax hide the future only."""
    fill = _last_fill(src)
    if fill is None:
        return []
    cond = fill.args[0] if fill.args else next((k.value for k in fill.keywords), None)
    if cond is None:
        return []
    base, hides_ones = _sense(cond)
    tri = _triangle(src, base)
    if tri is None:
        return []
    changes: list[Replace] = []
    # the positions hidden: tril's ones at j - i <= d, triu's at j - i >= d; the future is
    # j - i >= 1: triu's ones at d = 1, or tril's zeros at d = 0
    flip = hides_ones == tri.lower
    want = 0 if tri.lower else 1
    if flip:
        changes.append((cond, _flipped(src, cond)))
    if tri.diagonal != want:
        if flip and any(n is tri.call for n in ast.walk(cond)):
            return []  # both in one expression: the two changes would overlap
        changes.append(_diagonal(src, tri, want))
    return changes


def _last_fill(src: Source) -> ast.Call | None:
    """The last ``masked_fill`` with -inf before the located line in its function."""
    fills = [
        n
        for n in ast.walk(src.scope())
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr in _FILLS
        and n.lineno <= src.line
        and len(n.args) + len(n.keywords) == 2
        and _minus_inf(n.args[1] if len(n.args) > 1 else n.keywords[-1].value)
    ]
    return max(fills, key=lambda n: (n.lineno, n.col_offset), default=None)


def _minus_inf(e: ast.expr) -> bool:
    """``float("-inf")``, ``-float("inf")``, ``-torch.inf``, ``-math.inf``, ``-np.inf``."""
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        inner = e.operand
        return (isinstance(inner, ast.Attribute) and inner.attr == "inf") or (
            isinstance(inner, ast.Call) and _inf_literal(inner) == "inf"
        )
    return isinstance(e, ast.Call) and _inf_literal(e) == "-inf"


def _inf_literal(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name) and call.func.id == "float" and len(call.args) == 1:
        arg = call.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return arg.value.strip().lower()
    return None


def _sense(cond: ast.expr) -> tuple[ast.expr, bool]:
    """The mask ``cond`` reads and whether it hides where the mask is one (``m``, ``m == 1``,
    ``m != 0``, ``m.bool()``) or where it is zero (``~m``, ``m == 0``, ``m.logical_not()``)."""
    if isinstance(cond, ast.UnaryOp) and isinstance(cond.op, ast.Invert | ast.Not):
        base, ones = _sense(cond.operand)
        return base, not ones
    if isinstance(cond, ast.Call) and isinstance(cond.func, ast.Attribute):
        if cond.func.attr == "logical_not" and not cond.args:
            base, ones = _sense(cond.func.value)
            return base, not ones
        if cond.func.attr in ("bool", "to", "type") or cond.func.attr.startswith("type_as"):
            return _sense(cond.func.value)
    if isinstance(cond, ast.Compare) and len(cond.ops) == 1:
        value = cond.comparators[0]
        if isinstance(value, ast.Constant) and value.value in (0, 1):
            is_one = bool(value.value)
            equal = isinstance(cond.ops[0], ast.Eq)
            if equal or isinstance(cond.ops[0], ast.NotEq):
                return _sense(cond.left)[0], is_one == equal
    return cond, True


def _flipped(src: Source, cond: ast.expr) -> str:
    """``cond`` hiding the other positions: ``m == 1`` -> ``m == 0``, ``m != 0`` -> ``m ==
    0``, ``~m`` -> ``m``, ``m`` -> ``~m``."""
    if isinstance(cond, ast.UnaryOp) and isinstance(cond.op, ast.Invert | ast.Not):
        return src.seg(cond.operand)
    if isinstance(cond, ast.Compare) and len(cond.ops) == 1:
        value = cond.comparators[0]
        if isinstance(value, ast.Constant) and value.value in (0, 1):
            left = src.seg(cond.left)
            if isinstance(cond.ops[0], ast.NotEq):
                return f"{left} == {src.seg(value)}"
            if isinstance(value.value, bool):
                return f"{left} == {not value.value}"
            return f"{left} == {1 - value.value}"
    if (
        isinstance(cond, ast.Call)
        and isinstance(cond.func, ast.Attribute)
        and cond.func.attr == "logical_not"
    ):
        return src.seg(cond.func.value)
    return f"~{src.seg(cond)}"


def _root(e: ast.expr) -> ast.expr:
    """The mask under its slicing and casts: ``self.bias[:, :, :T, :T].bool()`` ->
    ``self.bias``."""
    while True:
        if isinstance(e, ast.Subscript):
            e = e.value
        elif (
            isinstance(e, ast.Call)
            and isinstance(e.func, ast.Attribute)
            and e.func.attr in ("bool", "to", "float", "type", "view", "unsqueeze")
        ):
            e = e.func.value
        else:
            return e


def _triangle(src: Source, cond: ast.expr) -> Triangle | None:
    """The ``tril``/``triu`` the mask is made by: in ``cond`` itself, else in the one
    assignment of its name or attribute in the file (``register_buffer("mask", ...)``,
    ``self.mask = ...``, ``mask = ...``), a name assigned from another followed once."""
    found = _triangles(cond)
    if found:
        return found[0] if len(found) == 1 else None
    root = _root(cond)
    for _ in range(2):
        made = _made(src, root)
        if made is None:
            return None
        found = _triangles(made)
        if found:
            return found[0] if len(found) == 1 else None
        root = _root(made)
    return None


def _made(src: Source, root: ast.expr) -> ast.expr | None:
    """The one value ``root`` (``self.bias``, ``mask``) is given in the file."""
    if isinstance(root, ast.Attribute):
        name = root.attr
    elif isinstance(root, ast.Name):
        name = root.id
    else:
        return None
    values = _values(src.tree, name)
    if len(values) > 1:  # one per class: the class of the located line's
        cls = [
            c
            for c in ast.walk(src.tree)
            if isinstance(c, ast.ClassDef) and c.lineno <= src.line <= (c.end_lineno or c.lineno)
        ]
        values = _values(cls[-1], name) if cls else values
    return values[0] if len(values) == 1 else None


def _values(within: ast.AST, name: str) -> list[ast.expr]:
    """The values ``name`` is given under ``within``: assigned, or registered as a buffer."""
    values = []
    for n in ast.walk(within):
        if isinstance(n, ast.Assign) and any(_names(t, name) for t in n.targets):
            values.append(n.value)
        elif (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "register_buffer"
            and len(n.args) >= 2
            and isinstance(n.args[0], ast.Constant)
            and n.args[0].value == name
        ):
            values.append(n.args[1])
    return values


def _names(target: ast.expr, name: str) -> bool:
    return (isinstance(target, ast.Attribute) and target.attr == name) or (
        isinstance(target, ast.Name) and target.id == name
    )


def _triangles(e: ast.expr) -> list[Triangle]:
    found = []
    for n in ast.walk(e):
        if not (isinstance(n, ast.Call) and name_of(n) in ("tril", "triu")):
            continue
        method = isinstance(n.func, ast.Attribute) and not _is_module(n.func.value)
        positional = n.args[0 if method else 1 :]
        given = next((k.value for k in n.keywords if k.arg == "diagonal"), None)
        given = given if given is not None else (positional[0] if positional else None)
        diagonal = 0 if given is None else _int(given)
        if diagonal is None:
            continue
        found.append(Triangle(n, name_of(n) == "tril", diagonal, given))
    return found


def _is_module(e: ast.expr) -> bool:
    return isinstance(e, ast.Name) and e.id in ("torch", "np", "numpy")


def _int(e: ast.expr) -> int | None:
    if isinstance(e, ast.Constant) and isinstance(e.value, int):
        return int(e.value)
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        inner = _int(e.operand)
        return -inner if inner is not None else None
    return None


def _diagonal(src: Source, tri: Triangle, want: int) -> Replace:
    if tri.given is not None:
        return (tri.given, str(want))
    text = src.seg(tri.call)
    head, _, rest = text.rpartition(")")
    empty = head.rstrip().endswith("(")
    return (tri.call, f"{head}{'' if empty else ', '}diagonal={want}){rest}")
