"""Where a non-finite loss was born, read from its autograd graph at ``backward()``: no replay.

A loss handed to ``backward()`` holds, in its autograd graph, every tensor its backward will
need: the operands each operation saved. Read before the backward frees them, they show
where the values turned non-finite without running anything again:

1. Each saved tensor tells whether the output of the node that made it (its ``grad_fn``) was
   finite; a node's saved result tells its own. The loss itself is known non-finite.
2. Outputs no consumer saved (a sum's input) are worked out where that is exact: an op whose
   operands were saved is recomputed (``a / b``, ``log(a)``), an op that cannot make a
   NaN/Inf from finite values (a sum, a view, a min) is finite exactly when its inputs are,
   and a product (``a * b``, a matrix product) whose saved operands cannot tell is non-finite
   when an input known below it is: NaN and inf times anything stay non-finite.
3. From the loss down, the walk follows a non-finite input until it reaches a node whose
   inputs were all finite: that operation made the value. An operand that was already
   non-finite when it entered the graph (a tensor computed without gradient, the
   advantage normalised under ``no_grad``) was made outside it: the program's variable that
   holds it is named, and the line that last assigned it.

Weights already non-finite are not a birth here (the optimizer's pass wrote them: see
``check_weights``). The walk reads tensors on the host; it runs only for a loss already
known non-finite, on the CPU (see ``collect.probes.locating``).
"""

from __future__ import annotations

import ast
import itertools
import linecache
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import torch
from torch import Tensor

from ..detect.finding import Origin, Reading
from . import mechanism
from .origin import place, user_frames

MAX_NODES = 20_000
"""Autograd nodes walked at most (a larger graph is read in part)."""

_TRANSPARENT = re.compile(
    r"(Add|Sub|Rsub|Neg|Sum|Mean|View|Reshape|Unsafe(View|Reshape)?|Expand|Squeeze|Unsqueeze|"
    r"Permute|Transpose|T|Clone|Select|Slice|Index|Cat|Stack|Split|Chunk|Minimum|Maximum|"
    r"Min|Max|Clamp|ClampMin|ClampMax|Where|MaskedFill|Relu|Abs|Narrow|Gather|Alias|"
    r"Contiguous|ToCopy|Copy|Flip|Roll|Repeat|MulScalar|Embedding)Backward\d*"
)
"""Nodes whose output is finite exactly when their inputs are (a sum's overflow aside)."""

_RECOMPUTE: dict[str, Callable[[Any], Tensor | None]] = {
    "DivBackward0": lambda n: _op(n, "_saved_self", "_saved_other", torch.div),
    "MulBackward0": lambda n: _op(n, "_saved_self", "_saved_other", torch.mul),
    "LogBackward0": lambda n: _op(n, "_saved_self", None, torch.log),
    "Log2Backward0": lambda n: _op(n, "_saved_self", None, torch.log2),
    "Log10Backward0": lambda n: _op(n, "_saved_self", None, torch.log10),
    "Log1PBackward0": lambda n: _op(n, "_saved_self", None, torch.log1p),
    "PowBackward0": lambda n: _op(n, "_saved_self", "_saved_exponent", torch.pow),
    "PowBackward1": lambda n: _op(n, "_saved_self", "_saved_exponent", torch.pow),
}
"""Operations whose output is worked out again from the operands they saved."""

_KEEPS: dict[str, slice] = {
    "MulBackward0": slice(None),
    "DivBackward0": slice(0, 1),  # x / inf is 0: only a non-finite numerator carries through
    "MmBackward0": slice(None),
    "BmmBackward0": slice(None),
    "MvBackward0": slice(None),
    "DotBackward0": slice(None),
    "AddmmBackward0": slice(None),
}
"""Operations whose output holds a NaN/Inf whenever one of these inputs does (a product: NaN
times anything, inf times anything; a matrix product: the row and column it meets): where the
operands they saved cannot tell (``a * b`` saves only the operand that the other's gradient
needs, ``(1 - y) * log(1 - h)`` keeps ``1 - y``), a non-finite input known below passes its
verdict up; and where every operand is finite, so is the product (in float32 and wider,
an overflow aside, as for a sum: ``exp(x @ W)`` whose matmul saved only ``x`` is born at the
exp)."""

_PRODUCTS = {k for k in _KEEPS if k != "DivBackward0"}
"""Of those, the ones finite whenever their operands are (not a division: x / 0)."""

_OPERANDS: dict[str, tuple[str, str]] = {
    "div": ("divisor", "exactly 0"),
    "log": ("argument", "<= 0"),
    "log2": ("argument", "<= 0"),
    "log10": ("argument", "<= 0"),
    "log1p": ("argument", "<= -1"),
    "sqrt": ("argument", "< 0"),
    "rsqrt": ("argument", "<= 0"),
}
"""What makes each unsafe operation's output non-finite, checked on the operand it saved."""

_UNSAFE_CALLS = {
    "std", "var", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "reciprocal", "pow",
    "exp", "div", "true_divide", "acos", "asin", "atanh", "norm", "normalize", "tan",
}  # fmt: skip
"""Calls that can make a NaN/Inf from finite values, looked for on an assignment's line."""


def _op(node: Any, a: str, b: str | None, fn: Callable[..., Tensor]) -> Tensor | None:
    x = getattr(node, a, None)
    if not isinstance(x, Tensor):
        return None
    if b is None:
        return fn(x)
    y = getattr(node, b, None)
    return fn(x, y) if isinstance(y, (Tensor, int, float)) else None


def op_name(node: Any) -> str:
    """``LinalgVectorNormBackward0`` -> ``linalg_vector_norm``."""
    return mechanism.node_op(node.name())


def _saved(node: Any) -> Iterator[tuple[str, Tensor]]:
    """The floating-point tensors ``node`` saved for its backward (``_saved_self``, ...)."""
    for name, value in mechanism.saved(node).items():
        for t in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(t, Tensor) and (t.is_floating_point() or t.is_complex()):
                yield name, t


def _finite(t: Tensor) -> bool:
    return bool(torch.isfinite(t).all())


@dataclass(slots=True)
class _Graph:
    """What the saved tensors tell of each node's output (by ``id``), and the operands that
    entered the graph without a node (tensors that need no gradient) and were not finite."""

    nodes: dict[int, Any] = field(default_factory=dict)
    finite: dict[int, bool] = field(default_factory=dict)
    entered: dict[int, list[tuple[str, Tensor]]] = field(default_factory=dict)

    def read(self, root: Any) -> None:
        todo = [root]
        while todo and len(self.nodes) < MAX_NODES:
            node = todo.pop()
            if node is None or id(node) in self.nodes:
                continue
            self.nodes[id(node)] = node
            variable = getattr(node, "variable", None)
            if isinstance(variable, Tensor):  # a leaf: the weights as the forward used them
                self._tell(node, _finite(variable.detach()))
                continue
            for name, t in _saved(node):
                ok = _finite(t)
                source = t.grad_fn
                if source is not None:
                    self._tell(source, ok)  # node's own result, or an input's output
                elif not t.requires_grad and not ok:
                    self.entered.setdefault(id(node), []).append((name, t))
            todo.extend(fn for fn, _ in node.next_functions)

    def _tell(self, node: Any, ok: bool) -> None:
        self.finite[id(node)] = self.finite.get(id(node), True) and ok

    def resolve(self, node: Any, depth: int = 0) -> bool | None:
        """Whether ``node``'s output was finite: known, recomputed, or worked out from its
        inputs for an op that cannot make a NaN/Inf; None when it cannot be told."""
        key = id(node)
        if key in self.finite:
            return self.finite[key]
        if key in self.entered:
            return False  # a non-finite operand went in (NaN * x is NaN)
        if depth > 200 or key not in self.nodes:
            return None
        verdict: bool | None = None
        recompute = _RECOMPUTE.get(node.name())
        if recompute is not None:
            try:
                out = recompute(node)
            except (RuntimeError, TypeError):
                out = None
            verdict = None if out is None else _finite(out)
        elif _TRANSPARENT.fullmatch(node.name()):
            inputs = [self.resolve(c, depth + 1) for c in _children(node)]
            verdict = False if False in inputs else (True if None not in inputs else None)
        keeps = _KEEPS.get(node.name())
        if verdict is None and keeps is not None:
            carried = [c for c, _ in node.next_functions[keeps] if c is not None]
            if False in [self.resolve(c, depth + 1) for c in carried]:
                verdict = False
            elif (
                node.name() in _PRODUCTS
                and not _half(node)
                and all(self.resolve(c, depth + 1) for c in _children(node))
            ):
                verdict = True  # finite operands: a finite product, in float32 and wider
        if verdict is not None:
            self.finite[key] = verdict
        return verdict


def _half(node: Any) -> bool:
    """Whether ``node`` works in float16, whose products of finite values overflow (65,504):
    its output is not known finite from finite operands."""
    return any(t.dtype == torch.float16 for _, t in _saved(node))


def _children(node: Any) -> list[Any]:
    return [fn for fn, _ in node.next_functions if fn is not None]


@dataclass(slots=True)
class GraphBirth:
    """Where the walk stopped: the node that made the value from finite inputs, or the node
    that took an operand already non-finite (``entered``)."""

    node: Any
    entered: tuple[str, Tensor] | None
    path: list[Any]
    """The nodes from the loss down to ``node``."""


def find_birth(loss: Tensor) -> GraphBirth | None:
    """Walk ``loss``'s graph (known non-finite) to where its non-finite value was made; None
    when the weights were already non-finite or the graph cannot tell."""
    root = loss.grad_fn
    if root is None:
        return None
    graph = _Graph()
    graph.read(root)
    graph.finite[id(root)] = False
    node, path = root, [root]
    while len(path) < MAX_NODES:
        if id(node) in graph.entered:
            return GraphBirth(node, graph.entered[id(node)][0], path)
        verdicts = [(c, graph.resolve(c)) for c in _children(node)]
        bad = [c for c, ok in verdicts if ok is False]
        if not bad:
            if any(ok is None for _, ok in verdicts):
                return None  # an input could not be told: the birth may lie below it
            return GraphBirth(node, None, path)
        node = bad[0]
        if isinstance(getattr(node, "variable", None), Tensor):
            return None  # the weights were non-finite already: the optimizer's pass
        path.append(node)
    return None


def origin_in_graph(loss: Tensor, step: int) -> Origin | None:
    """The :class:`Origin` of ``loss``'s non-finite value, from its graph and the user's
    frame that called ``backward()`` (its variables and source); None when not found."""
    birth = find_birth(loss)
    if birth is None:
        return None
    frame = _frame_holding(birth)
    names = _names(frame)
    called = (frame.f_code.co_filename, frame.f_lineno) if frame is not None else None
    how = "read from the loss's autograd graph at backward(), without a replay"
    chain = " <- ".join(op_name(n) for n in birth.path)
    evidence: list[Reading] = [Reading("operations from the loss down to it", chain)]
    if called is not None:
        evidence.append(Reading("the loss handed to backward() at", f"{called[0]}:{called[1]}"))
    if birth.entered is not None:
        operand, t = birth.entered
        name = names.get(id(t))
        label = f"`{name}`" if name else f"its {operand} operand"
        bad = int((~torch.isfinite(t)).sum())
        evidence[:0] = [
            Reading(
                f"non-finite values of {name or operand} when it entered", bad, {"of": t.numel()}
            ),
            Reading(f"values in {name or operand}", t.numel()),
        ]
        origin = Origin(phase="forward", step=step, evidence=evidence)
        line = _assigned(frame, name)
        if line is not None:
            place(origin, (frame.f_code.co_filename, line, _code(frame, line)))  # type: ignore[union-attr]
            origin.op = _unsafe_calls(origin.code or "") or None
            if origin.op is None:  # nothing on its line could make it: the data held it
                origin.phase = "input"
            else:
                origin.mechanism = mechanism.one_sample_entered(name or operand, t, origin.op)
        origin.note = (
            f"{label} was already non-finite when {op_name(birth.node)} took it into the "
            "loss: it was computed without gradient (detached, or under no_grad)"
            + (f", last assigned at line {line}" if line is not None else "")
            + f"; {how}"
        )
        return origin
    origin = Origin(phase="forward", step=step, op=op_name(birth.node), evidence=evidence)
    origin.evidence[:0] = _operand_facts(birth.node, names)
    made = mechanism.from_node(birth.node)
    origin.mechanism = mechanism.explain(made) if made is not None else None
    # the line: that of the variable nearest the op on the way to the loss (``cos = a / b``,
    # else ``loss = ...``) when it shows the op
    held = _held_outputs(frame)
    for node in reversed(birth.path):
        line = _assigned(frame, held.get(id(node)))
        if line is not None and frame is not None:
            line = _op_line(frame, line, origin.op or "", birth.node)
            if _mentions(_code(frame, line), origin.op or ""):
                place(origin, (frame.f_code.co_filename, line, _code(frame, line)))
            break
    origin.note = f"its inputs were finite and its output was not; {how}"
    return origin


def _operand_facts(node: Any, names: dict[int, str]) -> list[Reading]:
    """Why the op's output was non-finite, read on the operand it saved (a divisor of 0)."""
    facts: list[Reading] = []
    op = op_name(node)
    what = _OPERANDS.get(op)
    for operand, t in _saved(node):
        label = names.get(id(t)) or operand
        if operand in ("self", "other", "result") and t.grad_fn is not None and label == operand:
            label = f"{operand} ({op_name(t.grad_fn)})" if t.grad_fn is not node else operand
        if what is not None and operand == ("other" if op == "div" else "self"):
            rule = {"exactly 0": t == 0, "<= 0": t <= 0, "< 0": t < 0, "<= -1": t <= -1}[what[1]]
            count = int(rule.sum())
            if count:
                facts.append(
                    Reading(f"values of the {what[0]} {what[1]}", count, {"of": t.numel()})
                )
        facts.append(Reading(f"{op} operand", label, {"shape": list(t.shape)}))
    return facts[:6]


FRAMES_OUT = 16
"""Frames followed outward from ``backward()`` to the one that holds the birth's tensors."""


def _frame_holding(birth: GraphBirth) -> FrameType | None:
    """The user's frame whose variables hold the birth's tensors: the innermost one at
    ``backward()``, or, where a framework calls ``backward()`` for the program (Lightning's
    ``manual_backward``), the nearest one out that holds the tensor that entered non-finite
    or an output of the path below the loss."""
    frames = user_frames(2)
    first = next(frames, None)
    below = {id(n) for n in birth.path[1:]}
    for frame in itertools.islice(itertools.chain([first], frames), FRAMES_OUT):
        if frame is None:
            break
        if birth.entered is not None:
            if id(birth.entered[1]) in _names(frame):
                return frame
        elif below & _held_outputs(frame).keys():
            return frame
    return first


def _names(frame: FrameType | None) -> dict[int, str]:
    if frame is None:
        return {}
    return {id(v): k for k, v in frame.f_locals.items() if isinstance(v, Tensor)}


def _held_outputs(frame: FrameType | None) -> dict[int, str]:
    """The user's variables by the autograd node that made them (``cos`` by its div)."""
    if frame is None:
        return {}
    return {
        id(v.grad_fn): k
        for k, v in frame.f_locals.items()
        if isinstance(v, Tensor) and v.grad_fn is not None
    }


def _code(frame: FrameType | None, line: int) -> str:
    if frame is None:
        return ""
    return linecache.getline(frame.f_code.co_filename, line).strip()


def _assigned(frame: FrameType | None, name: str | None) -> int | None:
    """The last line at or before the frame's own that assigns ``name`` in the frame's
    function (or module)."""
    if frame is None or not name:
        return None
    source = "".join(linecache.getlines(frame.f_code.co_filename))
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    first, now = frame.f_code.co_firstlineno, frame.f_lineno
    scope: ast.AST = tree
    if frame.f_code.co_name != "<module>":
        scope = next(
            (
                n
                for n in ast.walk(tree)
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                and n.name == frame.f_code.co_name
                and (n.decorator_list[0].lineno if n.decorator_list else n.lineno) == first
            ),
            tree,
        )
    lines = [
        n.lineno
        for n in ast.walk(scope)
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
        and n.lineno <= now
        and any(
            isinstance(t, ast.Name) and t.id == name
            for target in (n.targets if isinstance(n, ast.Assign) else [n.target])
            for t in ast.walk(target)
        )
    ]
    return max(lines, default=None)


def _op_line(frame: FrameType, line: int, op: str, node: Any) -> int:
    """The line of ``op`` in the statement at ``line`` (a statement over several lines: the
    line of the call that made the value, not the statement's first), told apart from the
    statement's other calls of ``op`` by what made its operand (``log(1 - h)`` from an
    ``rsub``, not ``log(h)``)."""
    try:
        tree = ast.parse("".join(linecache.getlines(frame.f_code.co_filename)))
    except (SyntaxError, ValueError):
        return line
    stmt = next((n for n in ast.walk(tree) if isinstance(n, ast.stmt) and n.lineno == line), None)
    if stmt is None or getattr(stmt, "end_lineno", line) == line:
        return line
    calls = [(n, arg) for n in ast.walk(stmt) if (arg := _operand_of(n, op)) is not None]
    if not calls:
        return line
    below = _children(node)
    made = op_name(below[0]) if below else ""
    fitting = [n for n, arg in calls if _shape(arg) == made]
    chosen = fitting if len(fitting) == 1 else [n for n, _ in calls] if len(calls) == 1 else []
    return int(getattr(chosen[0], "lineno", line)) if chosen else line


def _operand_of(n: ast.AST, op: str) -> ast.expr | None:
    """The operand of a call of ``op`` (``torch.log(a)``, ``a.log()``, ``a / b``'s ``b``)."""
    if op == "div" and isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div):
        return n.right
    if isinstance(n, ast.Call) and isinstance(n.func, (ast.Attribute, ast.Name)):
        name = n.func.attr if isinstance(n.func, ast.Attribute) else n.func.id
        if name == op:
            if n.args:
                return n.args[0]
            return n.func.value if isinstance(n.func, ast.Attribute) else None
    return None


_BINOPS = {ast.Sub: "sub", ast.Add: "add", ast.Mult: "mul", ast.Div: "div", ast.Pow: "pow"}


def _shape(arg: ast.expr) -> str:
    """The op an operand's expression ends in, as autograd names it (``1 - h``: rsub)."""
    if isinstance(arg, ast.BinOp):
        name = _BINOPS.get(type(arg.op), "")
        return "rsub" if name == "sub" and isinstance(arg.left, ast.Constant) else name
    if isinstance(arg, ast.Call) and isinstance(arg.func, (ast.Attribute, ast.Name)):
        return arg.func.attr if isinstance(arg.func, ast.Attribute) else arg.func.id
    return ""


_DIVIDES = re.compile(r"[^/]/[^/=]")
"""A ``/`` on a line of code (not ``//`` nor ``/=``)."""


def _unsafe_calls(code: str) -> str:
    """The calls on a line that can make a NaN/Inf from finite values (``std or div``)."""
    found = [m for m in re.findall(r"\.?(\w+)\s*\(", code) if m in _UNSAFE_CALLS]
    if _DIVIDES.search(code):
        found.append("div")
    return " or ".join(dict.fromkeys(found))


def _mentions(code: str, op: str) -> bool:
    if op == "div":
        return bool(_DIVIDES.search(code)) or "div(" in code
    return f"{op}(" in code or (op == "pow" and "**" in code)
