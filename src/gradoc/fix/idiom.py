"""The stable idiom of a NaN's mechanism, written in place of the expression the run located.

``locate.mechanism`` says why the value was bad (every ``exp`` of a hand-written log-sum-exp
underflowed, a ``sigmoid`` rounded to 1.0 before ``log(1 - p)``); this writes the idiom that
removes the cause where the program computes it, keeping its variable names and dims:

==========================  ==========================================================
``exp_sum_underflow``       ``torch.log(torch.sum(torch.exp(x), 1))`` -> ``torch.logsumexp(x, 1)``
``log_of_softmax``          ``torch.log(F.softmax(x, dim=-1))`` -> ``torch.log_softmax(x, dim=-1)``
``sigmoid_rounded``         ``torch.log(1 - p)`` -> ``F.logsigmoid(-z)`` (and ``log(p)`` ->
                            ``F.logsigmoid(z)``), ``p = torch.sigmoid(z)``
``tanh_rounded``            ``torch.log(1 - t**2)`` -> ``2 * (log(2) - u - F.softplus(-2 * u))``,
                            ``torch.atanh(t)`` -> ``u``, ``t = torch.tanh(u)``
``saturated_division``      ``p / (1 - p)`` -> ``torch.exp(z)``, ``a / (1 - p)`` -> ``a * (1 +
                            torch.exp(z))``, ``p = torch.sigmoid(z)``
``product_underflow``       ``torch.log(torch.prod(p, 1))`` -> ``torch.log(p).sum(1)``
``zero_norm``               ``x / x.norm(dim=1, keepdim=True)`` -> ``F.normalize(x, dim=1)``
``zero_std``                ``x.std(1)`` under a division -> ``torch.sqrt(x.var(1) + 1e-5)``
``one_sample``              ``x.std()`` -> ``x.std(correction=0)``, under a division ``(x.std(
                            correction=0) + 1e-8)``
``sqrt_at_zero``            ``torch.sqrt(d)`` -> ``torch.sqrt(d + 1e-12)``
``variance_cancellation``   ``torch.mean(x**2, 1) - torch.mean(x, 1)**2`` -> ``torch.var(x, 1,
                            correction=0)``
``cosine_past_one``         ``torch.acos(c)`` -> ``torch.acos(c.clamp(-1 + 1e-7, 1 - 1e-7))``
``fractional_power``        ``x ** 0.3`` -> ``x.clamp_min(1e-6) ** 0.3``
``overflow`` (``exp``)      ``torch.exp(x)`` -> ``torch.exp(x.clamp(max=80.0))``; in float16:
                            ``torch.exp(x.float())``
``overflow`` (``@``, f16)   ``a @ b`` -> ``a.float() @ b.float()`` under ``torch.autocast(...,
                            enabled=False)``
``zero_length``             ``pos / (n - 1)`` -> ``pos / (n - 1).clamp_min(1)``
``masked_row``              ``masked_fill(tril == 1, -inf)`` -> ``masked_fill(tril == 0,
                            -inf)``, ``triu(ones, diagonal=0)`` -> ``diagonal=1`` (``fix.causal``)
==========================  ==========================================================

An expression the line does not hold in one of these shapes gets no edit (the fix stays the
idiom in words): a clamp is no repair of an underflow.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from functools import partial

from ..detect.finding import Finding, Origin
from ..locate.mechanism import PYTHON_DIVISOR, low_precision
from .causal import unmask
from .edit import Edit
from .source import Replace, Source, edit_of, located_source, parsed
from .source import name_of as _name

__all__ = ["Replace", "Source", "edit_of", "idiom_edit", "parsed"]


def idiom_edit(f: Finding, origin: Origin) -> Edit | None:
    """The edit writing the idiom of ``origin.mechanism`` at the located line, else None."""
    m = origin.mechanism
    if m is None or not origin.file or origin.line is None:
        return None
    writer = WRITERS.get(m.name)
    src = located_source(origin)
    if writer is None or src is None:
        return None
    try:
        changes = writer(src, origin)
    except (AttributeError, IndexError, ValueError):
        return None
    if not changes:
        return None
    return edit_of(
        f, src, origin.file, changes, f"write {m.name.replace('_', ' ')} in its stable form"
    )


# -- shapes ---------------------------------------------------------------------------------
def _is_method(call: ast.Call) -> bool:
    """``x.log()`` (the tensor's method), not ``torch.log(x)`` / ``F.softmax(x)``."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    owner = func.value
    while isinstance(owner, ast.Attribute):
        owner = owner.value
    return not (
        isinstance(owner, ast.Name) and owner.id in ("torch", "F", "nn", "functional", "special")
    )


def _subject(call: ast.Call) -> ast.expr | None:
    """The tensor a call works on: ``x`` of ``x.log()`` and of ``torch.log(x)``."""
    if _is_method(call) and isinstance(call.func, ast.Attribute):
        return call.func.value
    return call.args[0] if call.args else None


def _rest(src: Source, call: ast.Call) -> list[str]:
    """A call's arguments after its subject, and its keywords, as written."""
    args = call.args if _is_method(call) else call.args[1:]
    return [src.seg(a) for a in args] + [src.seg(k) for k in call.keywords]


def _calls(src: Source, names: set[str], node: ast.AST | None = None) -> list[ast.Call]:
    """Calls named one of ``names`` that start on the located line (or under ``node``)."""
    pool = ast.walk(node) if node is not None else src.at_line()
    return [n for n in pool if isinstance(n, ast.Call) and _name(n) in names]


def _everywhere(
    src: Source, names: set[str], write: Callable[[ast.Call], str | None]
) -> list[Replace]:
    """``write`` for each call of ``names`` in the located line's function, where one of them
    is on the located line: the same hand-written form is made stable wherever the function
    repeats it (a log-sum-exp per time step and again for the total)."""
    out: list[Replace] = [
        (c, t) for c in _calls(src, names, src.scope()) if (t := write(c)) is not None
    ]
    return out if any(c.lineno <= src.line <= (c.end_lineno or c.lineno) for c, _ in out) else []


def _wrapped(src: Source, e: ast.expr) -> str:
    """``e``'s source, parenthesised where a method or an operator would bind into it."""
    text = src.seg(e)
    simple = isinstance(e, ast.Name | ast.Attribute | ast.Call | ast.Subscript | ast.Constant)
    return text if simple else f"({text})"


def _assignment(src: Source, name: str) -> ast.Assign | None:
    """The statement that last assigned ``name`` before the located line: in its function,
    else in the file."""
    for pool in (src.scope(), src.tree):
        found: list[ast.Assign] = [
            n
            for n in ast.walk(pool)
            if isinstance(n, ast.Assign)
            and n.lineno < src.line
            and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)
        ]
        if found:
            return max(found, key=lambda n: n.lineno)
    return None


def _bound(src: Source, name: str) -> ast.expr | None:
    """The value last assigned to ``name`` before the located line (in its function)."""
    assign = _assignment(src, name)
    return assign.value if assign is not None else None


def _through(src: Source, e: ast.expr | None) -> ast.expr | None:
    """``e``, or the value its name was last given."""
    if isinstance(e, ast.Name):
        return _bound(src, e.id)
    return e


# -- writers ---------------------------------------------------------------------------------
LOGS = {"log", "log2", "log10"}


def _lse(src: Source, origin: Origin) -> list[Replace]:
    def write(log: ast.Call) -> str | None:
        total = _through(src, _subject(log))  # ``s = torch.exp(x).sum(1)`` then ``log(s)``
        if not (isinstance(total, ast.Call) and _name(total) == "sum"):
            return None
        exp = _subject(total)
        if not (isinstance(exp, ast.Call) and _name(exp) == "exp"):
            return None
        x = _subject(exp)
        if x is None:
            return None
        dims = _rest(src, total)
        if dims:
            return f"torch.logsumexp({src.seg(x)}, {', '.join(dims)})"
        return f"torch.logsumexp({_wrapped(src, x)}.flatten(), 0)"

    return _everywhere(src, {"log"}, write)


def _log_softmax(src: Source, origin: Origin) -> list[Replace]:
    def write(log: ast.Call) -> str | None:
        sm = _through(src, _subject(log))
        if not (isinstance(sm, ast.Call) and _name(sm) == "softmax"):
            return None
        x = _subject(sm)
        if x is None:
            return None
        rest = _rest(src, sm)
        if _is_method(sm):
            return f"{_wrapped(src, x)}.log_softmax({', '.join(rest)})"
        return f"torch.log_softmax({', '.join([src.seg(x), *rest])})"

    return _everywhere(src, {"log"}, write)


_SIGMOIDS = {"sigmoid", "expit"}


def _logit(src: Source, p: ast.expr | None) -> ast.expr | None:
    """``z`` of ``torch.sigmoid(z)`` / ``z.sigmoid()``, reached through ``p``'s name."""
    p = _through(src, p)
    if isinstance(p, ast.Call) and _name(p) in _SIGMOIDS:
        return _subject(p)
    return None


def _logsigmoid(src: Source, origin: Origin) -> list[Replace]:
    fn = f"{src.functional}.logsigmoid"

    def write(log: ast.Call) -> str | None:
        arg = _subject(log)
        if (p := _one_minus(arg)) is not None:
            z = _logit(src, p)
            return None if z is None else f"{fn}(-{_wrapped(src, z)})"
        z = _logit(src, arg)
        return None if z is None else f"{fn}({src.seg(z)})"

    return _everywhere(src, {"log"}, write)


def _product(src: Source, origin: Origin) -> list[Replace]:
    def write(log: ast.Call) -> str | None:
        prod = _subject(log)
        if isinstance(prod, ast.Call) and _name(prod) == "prod" and (p := _subject(prod)):
            return f"torch.log({src.seg(p)}).sum({', '.join(_rest(src, prod))})"
        return None

    return _everywhere(src, {"log"}, write)


def _divisions(src: Source) -> list[ast.BinOp]:
    stmt = src.statement()
    pool = ast.walk(stmt) if stmt is not None else src.at_line()
    return [n for n in pool if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div)]


_NORMS = {"norm", "vector_norm"}


def _normalize(src: Source, origin: Origin) -> list[Replace]:
    for div in _divisions(src):
        norm = div.right
        if not (isinstance(norm, ast.Call) and _name(norm) in _NORMS):
            continue
        x = _subject(norm)
        dim = next((src.seg(k.value) for k in norm.keywords if k.arg == "dim"), None)
        if dim is None:
            args = norm.args if _is_method(norm) else norm.args[1:]
            dim = src.seg(args[1]) if len(args) > 1 else None
        if x is not None and dim is not None and src.seg(x) == src.seg(div.left):
            return [(div, f"{src.functional}.normalize({src.seg(x)}, dim={dim})")]
        return [(norm, f"{_wrapped(src, norm)}.clamp_min(1e-12)")]
    return []


def _std(src: Source, origin: Origin) -> list[Replace]:
    for div in _divisions(src):
        std = div.right
        if isinstance(std, ast.Call) and _name(std) == "std" and (x := _subject(std)):
            rest = ", ".join(_rest(src, std))
            var = f"{_wrapped(src, x)}.var({rest})"
            return [(std, f"torch.sqrt({var} + 1e-5)")]
    return []


def _one_sample(src: Source, origin: Origin) -> list[Replace]:
    for call in _calls(src, {"std", "var"}):
        x = _subject(call)
        if x is None:
            continue
        kept = [src.seg(a) for a in (call.args if _is_method(call) else call.args[1:])]
        kept += [src.seg(k) for k in call.keywords if k.arg not in ("unbiased", "correction")]
        args = ", ".join([*kept, "correction=0"])
        if _is_method(call):
            text = f"{_wrapped(src, x)}.{_name(call)}({args})"
        else:
            text = f"torch.{_name(call)}({src.seg(x)}, {args})"
        if any(d.right is call for d in _divisions(src)):  # (a - a.mean()) / a.std(): 0/0
            text = f"({text} + {ONE_SAMPLE_EPS})"
        return [(call, text)]
    return []


ONE_SAMPLE_EPS = "1e-8"
"""Added to a one-sample-safe std under a division: the std of one value is 0, and so is what
it divides (``x - x.mean()``); 0 / 1e-8 is 0 (PPO's advantage normalisation)."""


def _inside_root(src: Source, root: str, eps: str) -> list[Replace]:
    """The epsilon inside the first call of ``root`` on the line: ``torch.sqrt(d)`` ->
    ``torch.sqrt(d + eps)``, ``d.rsqrt()`` -> ``(d + eps).rsqrt()``."""
    for call in _calls(src, {root}):
        x = _subject(call)
        if x is not None:
            if _is_method(call):
                return [(call, f"({src.seg(x)} + {eps}).{root}()")]
            return [(call, f"{src.seg(call.func)}({src.seg(x)} + {eps})")]
    return []


def _rsqrt_eps(src: Source, origin: Origin) -> list[Replace]:
    return _inside_root(src, "rsqrt", "1e-6")


def _sqrt_eps(src: Source, origin: Origin) -> list[Replace]:
    found = _inside_root(src, "sqrt", "1e-12")
    if found:
        return found
    for n in src.at_line():
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Pow) and _half_power(n.right):
            return [(n, f"({src.seg(n.left)} + 1e-12) ** {src.seg(n.right)}")]
    return []


def _half_power(e: ast.expr) -> bool:
    return isinstance(e, ast.Constant) and isinstance(e.value, float) and 0 < e.value < 1


_MEANS = {"mean"}


def _variance(src: Source, origin: Origin) -> list[Replace]:
    """``mean(x**2) - mean(x)**2`` at the located statement, else the one the file holds."""
    stmt = src.statement()
    pools = [ast.walk(stmt)] if stmt is not None else []
    pools.append(ast.walk(src.tree))
    for pool in pools:
        for n in pool:
            found = _var_of(src, n)
            if found is not None:
                return [found]
    return []


def _var_of(src: Source, n: ast.AST) -> Replace | None:
    if not (isinstance(n, ast.BinOp) and isinstance(n.op, ast.Sub)):
        return None
    left, right = n.left, n.right
    if not (isinstance(left, ast.Call) and _name(left) in _MEANS):
        return None
    base = _squared(_subject(left))
    mean = _squared(right)
    if base is None or not (isinstance(mean, ast.Call) and _name(mean) in _MEANS):
        return None
    x = _subject(mean)
    if x is None or src.seg(x) != src.seg(base):
        return None
    rest = _rest(src, mean)
    return n, f"torch.var({', '.join([src.seg(x), *rest, 'correction=0'])})"


def _with_constant(
    e: ast.expr | None, op: type[ast.operator], value: float, left: bool
) -> ast.expr | None:
    """The other operand of ``e`` where it is ``value <op> x`` (``left``) or ``x <op> value``:
    ``p`` of ``1 - p``, ``x`` of ``x ** 2``."""
    if not (isinstance(e, ast.BinOp) and isinstance(e.op, op)):
        return None
    constant, other = (e.left, e.right) if left else (e.right, e.left)
    return other if isinstance(constant, ast.Constant) and constant.value == value else None


def _squared(e: ast.expr | None) -> ast.expr | None:
    """The base of ``x ** 2``, ``x * x``, ``x.pow(2)``, ``torch.square(x)``."""
    if (base := _with_constant(e, ast.Pow, 2, left=False)) is not None:
        return base
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Mult):
        return e.left if ast.dump(e.left) == ast.dump(e.right) else None
    if isinstance(e, ast.Call) and _name(e) == "pow":
        exponent = e.args[-1] if e.args else None
        if isinstance(exponent, ast.Constant) and exponent.value == 2:
            return _subject(e)
    if isinstance(e, ast.Call) and _name(e) == "square":
        return _subject(e)
    return None


# -- a squashing function's argument, recovered -----------------------------------------------
_SHAPES = {"squeeze", "unsqueeze", "view", "reshape", "flatten", "contiguous", "float", "double"}
"""Ops that commute with an elementwise function: ``sigmoid(z).squeeze(-1)``."""


def _unsquash(
    src: Source, p: ast.expr | None, squash: set[str], write: Callable[[str], str], suffix: str
) -> tuple[str, list[Replace]] | None:
    """``p`` (``sigmoid(z)``, through its name and the shape ops after it) with the squashing
    call written as ``write(z)``: the value computed from the argument the squash rounded.
    Where ``p`` is a name bound to a squash of an expression, that expression is given a name
    first (``e = self.score(x).sigmoid()`` -> ``e_logit = self.score(x)``; ``e =
    e_logit.sigmoid()``), so that nothing is computed twice; the second list holds that edit."""
    if p is None:
        return None
    assign = _assignment(src, p.id) if isinstance(p, ast.Name) else None
    e = assign.value if assign is not None else p
    node: ast.expr | None = e
    while isinstance(node, ast.Call | ast.Subscript):
        if isinstance(node, ast.Subscript):
            node = node.value
        elif _name(node) in squash:
            break
        elif _name(node) in _SHAPES and _is_method(node):
            node = _subject(node)
        else:
            return None
    if not (isinstance(node, ast.Call) and _name(node) in squash):
        return None
    z = _subject(node)
    if z is None:
        return None
    hoist: list[Replace] = []
    z_text = _wrapped(src, z)
    if assign is not None and isinstance(p, ast.Name) and not isinstance(z, ast.Name):
        z_text = src.fresh(f"{p.id}_{suffix}")
        named = src.spliced(assign, [(z, z_text)])
        hoist = [(assign, f"{z_text} = {src.seg(z)}\n{src.indent(assign)}{named}")]
    return src.spliced(e, [(node, write(z_text))]), hoist


def _formatted(form: str, u: str) -> str:
    return form.format(u=u)


def _ln2(src: Source) -> str:
    return "math.log(2)" if src.imports("math") else "0.6931471805599453"


def _one_minus(e: ast.expr | None) -> ast.expr | None:
    """``p`` of ``1 - p``."""
    return _with_constant(e, ast.Sub, 1, left=True)


def _tanh(src: Source, origin: Origin) -> list[Replace]:
    """``log(1 - tanh(u)**2)`` -> ``2 * (log(2) - u - softplus(-2u))``, ``log(1 - tanh(u))``
    -> ``log(2) + logsigmoid(-2u)``, ``atanh(tanh(u))`` -> ``u``: the value from the
    pre-tanh argument, which never rounds. An ``atanh`` of a value whose making the file
    does not show gets its argument clamped inside (-1, 1)."""
    f, ln2 = src.functional, _ln2(src)
    squared = f"(2 * ({ln2} - {{u}} - {f}.softplus(-2 * {{u}})))"
    single = f"({ln2} + {f}.logsigmoid(-2 * {{u}}))"
    for log in _calls(src, {"log"}):
        t = _one_minus(_subject(log))
        square = _squared(t)
        form = squared if square is not None else single
        got = _unsquash(src, square or t, {"tanh"}, partial(_formatted, form), "pre")
        if got is not None:
            value, hoist = got
            return [*hoist, (log, value)]
    for call in _calls(src, {"atanh", "arctanh"}):
        got = _unsquash(src, _subject(call), {"tanh"}, lambda u: u, "pre")
        if got is not None:
            value, hoist = got
            return [*hoist, (call, value)]
    return _cosine(src, origin)


def _saturated(src: Source, origin: Origin) -> list[Replace]:
    """``a / (1 - p)`` with ``p = sigmoid(z)`` -> ``a * (1 + exp(z))``, and ``p / (1 - p)``
    -> ``exp(z)``: the ratio written in the logit, finite where ``p`` rounded to 1."""
    for div in _divisions(src):
        p = _one_minus(div.right)
        got = _unsquash(src, p, _SIGMOIDS, lambda z: f"torch.exp({z})", "logit")
        if p is None or got is None:
            continue
        odds, hoist = got
        if src.seg(div.left) == src.seg(p):
            return [*hoist, (div, odds)]
        return [*hoist, (div, f"{_wrapped(src, div.left)} * (1 + {odds})")]
    return []


def _cosine(src: Source, origin: Origin) -> list[Replace]:
    for call in _calls(src, {"acos", "asin", "arccos", "arcsin", "atanh"}):
        x = _subject(call)
        if x is None:
            continue
        bound = "1e-6" if _name(call) == "atanh" else "1e-7"
        clamped = f"{_wrapped(src, x)}.clamp(-1 + {bound}, 1 - {bound})"
        if _is_method(call):
            return [(call, f"{clamped}.{_name(call)}()")]
        owner = src.seg(call.func)
        return [(call, f"{owner}({clamped})")]
    return []


def _power(src: Source, origin: Origin) -> list[Replace]:
    for n in src.at_line():
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Pow):
            p = n.right
            if (
                isinstance(p, ast.Constant)
                and isinstance(p.value, float)
                and not p.value.is_integer()
            ):
                return [(n.left, f"{_wrapped(src, n.left)}.clamp_min(1e-6)")]
    for call in _calls(src, {"pow"}):
        x = _subject(call)
        if x is not None:
            return [(x, f"{_wrapped(src, x)}.clamp_min(1e-6)")]
    return []


def _overflow(src: Source, origin: Origin) -> list[Replace]:
    m = origin.mechanism
    low = m is not None and low_precision(m)
    for call in _calls(src, {"exp"}):
        x = _subject(call)
        if x is None:
            continue
        fixed = f"{_wrapped(src, x)}.float()" if low else f"{_wrapped(src, x)}.clamp(max=80.0)"
        if _is_method(call):
            return [(call, f"{fixed}.exp()")]
        return [(call, f"{src.seg(call.func)}({fixed})")]
    return _product_in_float32(src) if low else []


_PRODUCTS = {"matmul", "mm", "bmm"}
_SIMPLE = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return, ast.Expr)


def _product_in_float32(src: Source) -> list[Replace]:
    """A float16 matrix product that overflowed, computed in float32 with autocast off
    around it (autocast would cast ``.float()`` operands back to float16):

        with torch.autocast(device_type="cuda", enabled=False):
            scores = q.float() @ k.transpose(-2, -1).float()

    A statement that does more than the product computes the product first, into a name of
    its own, and uses it."""
    stmt = src.statement()
    if not isinstance(stmt, _SIMPLE) or stmt.lineno != src.line:
        return []
    for n in ast.walk(stmt):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult):
            a, b = n.left, n.right
            wide = f"{_wrapped(src, a)}.float() @ {_wrapped(src, b)}.float()"
        elif isinstance(n, ast.Call) and _name(n) in _PRODUCTS and len(n.args) == 2:
            a, b = n.args
            wide = f"{src.seg(n.func)}({_wrapped(src, a)}.float(), {_wrapped(src, b)}.float())"
        else:
            continue
        device = _autocast_device(src, a)
        if device is None:
            return []
        pad = src.indent(stmt)
        off = f"with torch.autocast(device_type={device}, enabled=False):\n{pad}    "
        if getattr(stmt, "value", None) is n:
            return [(stmt, off + src.spliced(stmt, [(n, wide)]))]
        name = src.fresh("product")
        return [(stmt, f"{off}{name} = {wide}\n{pad}{src.spliced(stmt, [(n, name)])}")]
    return []


def _autocast_device(src: Source, operand: ast.expr) -> str | None:
    """The device type of the program's autocast region, as the file writes it
    (``torch.autocast("cuda", ...)``, ``torch.cuda.amp.autocast()``), else the operand's."""
    for n in ast.walk(src.tree):
        if isinstance(n, ast.Call) and _name(n) == "autocast":
            owner = src.seg(n.func)
            for dev in ("cuda", "cpu", "xpu", "mps"):
                if f".{dev}.amp." in f".{owner}":
                    return repr(dev)
            given = next((k.value for k in n.keywords if k.arg == "device_type"), None)
            given = given or (n.args[0] if n.args else None)
            if isinstance(given, ast.Constant) and isinstance(given.value, str):
                return repr(given.value)
    if isinstance(operand, ast.Name):
        return f"{operand.id}.device.type"
    return None


def _length(src: Source, origin: Origin) -> list[Replace]:
    m = origin.mechanism
    number = m is not None and any(r.signal == PYTHON_DIVISOR for r in m.evidence)
    for div in _divisions(src):
        d = div.right
        if isinstance(d, ast.BinOp) and isinstance(d.op, ast.Sub):
            if number:  # a Python int: no tensor method
                return [(d, f"max({src.seg(d)}, 1)")]
            return [(d, f"({src.seg(d)}).clamp_min(1)")]
        if isinstance(d, ast.Call) and _name(d) == "sum":
            return [(d, f"{src.seg(d)}.clamp_min(1)")]
    return []


WRITERS: dict[str, Callable[[Source, Origin], list[Replace]]] = {
    "exp_sum_underflow": _lse,
    "log_of_softmax": _log_softmax,
    "sigmoid_rounded": _logsigmoid,
    "tanh_rounded": _tanh,
    "saturated_division": _saturated,
    "product_underflow": _product,
    "zero_norm": _normalize,
    "zero_std": _std,
    "one_sample": _one_sample,
    "sqrt_at_zero": _sqrt_eps,
    "root_of_zero": _rsqrt_eps,
    "variance_cancellation": _variance,
    "cosine_past_one": _cosine,
    "fractional_power": _power,
    "overflow": _overflow,
    "zero_length": _length,
    "masked_row": unmask,
}
"""The mechanisms whose idiom is written as an edit."""
