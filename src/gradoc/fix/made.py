"""Edits where a value is made, not where the run used it: the batch's mask in the collator, the
labels where they are built, the loop that froze the model, the scale the weights start at.

The located line of these causes is not where their fix belongs: the model is called by a
``Trainer`` (no line of the user's calls it), the labels were copied from the ids in a
dataset's ``__init__``, the freeze ran once before the optimizer was made. Each writer here
reads the user's files (``Seen.sources``) for the one place the cause is written, and writes
its edit there only where exactly one place reads as the run saw it:

- ``padding_leak`` (seen in the inputs, a model that takes a mask and got none): the function
  that builds the batch's dict (``return {"input_ids": pad_sequence(...), "labels": y}``)
  given the mask from the pad token: ``batch["attention_mask"] = (batch["input_ids"] !=
  pad).long()``;
- ``loss_includes_padding`` (labels that score the pads): the labels padded with -100
  (``pad_sequence(ys, padding_value=PAD)`` -> ``padding_value=-100``), else where they are
  copied from the ids, -100 at the pads (``enc["labels"] = list(enc["input_ids"])`` ->
  ``[-100 if t == pad else t for t in enc["input_ids"]]``, a tensor's ``masked_fill``);
- ``frozen_parameters`` (never a gradient, though the optimizer holds them): the loop that set
  ``requires_grad = False`` on the whole model removed (or its ``False`` made ``True``);
- weights initialised at the wrong scale (``poor_initialization``, or a finding whose first
  hypothesis is the initialisation): ``normal_(w, std=1.0)`` -> ``std=w[0].numel() ** -0.5``
  (1/sqrt(fan in)), a weight's ``zeros_`` -> ``normal_(w, mean=0.0, std=...)`` at that
  scale, a ``w.data *= 10`` after the init removed;
- ``loss_unbounded`` with a Gaussian KL term written with its sign flipped (``0.5 *
  torch.sum(1 + logvar - mu.pow(2) - logvar.exp())``): its sign restored.

Where no place, or more than one, reads so, the writer says why in ``Seen.why``, for the
terminal.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from ..detect.finding import Family, Finding
from .edit import Edit
from .source import Replace, Seen, Source, details_of, edit_of, name_of, parsed

T = TypeVar("T", bound=tuple[Any, ...])

PAD_LABEL = -100
"""The label a Hugging Face model's loss (and ``F.cross_entropy``'s default) ignores."""

TOO_WIDE = 0.2
"""A normal init's std (written as a number) above this is too wide for any layer of the width
of a model's hidden size (64 and more): 1/sqrt(64) = 0.125."""


def _files(seen: Seen) -> Iterator[tuple[Path, Source]]:
    for path in seen.sources:
        src = parsed(path)
        if src is not None:
            yield path, src


def _key(node: ast.expr | None, key: str) -> bool:
    return isinstance(node, ast.Constant) and node.value == key


def _in_script(seen: Seen, found: list[T]) -> list[T]:
    """Of several places found (each a tuple whose first item is its file), those in the
    script itself where there are any: a file beside it may be another program."""
    script = seen.sources[0] if seen.sources else None
    mine = [x for x in found if x[0] == script]  # type: ignore[index]
    return mine if len(found) > 1 and mine else found


def _one(seen: Seen, found: list[T], none: str, many: str) -> T | None:
    """The one place found, else None with why said: ``none`` where there is none, ``many``
    (its ``{n}`` the count) where there are several."""
    if len(found) == 1:
        return found[0]
    _why(seen, many.format(n=len(found)) if found else none)
    return None


def _why(seen: Seen, reason: str) -> None:
    seen.why.append(reason)


# -- the batch's mask ----------------------------------------------------------------------------
Batch = tuple[ast.FunctionDef | ast.AsyncFunctionDef, ast.stmt, ast.expr, ast.expr, str | None]


def _batch_dicts(src: Source) -> Iterator[Batch]:
    """The statements of a function that make its batch's dict (a ``return {...}`` or ``x =
    {...}`` returned later): the function, the statement, the dict, the ``input_ids`` value in
    it, and the variable (None for a ``return``)."""
    for fn in ast.walk(src.tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        returned = {
            r.value.id
            for r in ast.walk(fn)
            if isinstance(r, ast.Return) and isinstance(r.value, ast.Name)
        }
        for stmt in ast.walk(fn):
            if isinstance(stmt, ast.Return) and stmt.value is not None:
                value, name = stmt.value, None
            elif (
                isinstance(stmt, ast.Assign)
                and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
                and stmt.targets[0].id in returned
            ):
                value, name = stmt.value, stmt.targets[0].id
            else:
                continue
            ids = _entry(value, "input_ids")
            if ids is not None:
                yield fn, stmt, value, ids, name


def _entry(value: ast.expr, key: str) -> ast.expr | None:
    """The value of ``key`` in a dict display or a ``dict(...)`` call."""
    if isinstance(value, ast.Dict):
        pairs = zip(value.keys, value.values, strict=True)
        return next((v for k, v in pairs if _key(k, key)), None)
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "dict":
        return next((k.value for k in value.keywords if k.arg == key), None)
    return None


def collated_mask(f: Finding, seen: Seen) -> Edit | None:
    """The mask the model takes, added to the dict the collator returns, from the pad token
    (the padding value its ``input_ids`` were padded with, where it names one)."""
    pad = seen.meta.pad_id
    # seen in the inputs, or found by the audit (--check padding) in a run whose inputs had
    # pads and no mask although the model takes one
    param = details_of(f).get("mask_param") or seen.meta.unmasked_param
    if not isinstance(pad, int) or not isinstance(param, str):
        return None
    if param == "attention_mask":  # Hugging Face's: 1 at a real token
        sense = "!="
    elif param.endswith("key_padding_mask"):  # nn.MultiheadAttention's: True at a pad
        sense = "=="
    else:
        _why(seen, f"{param}: its sense (1 at a token or at a pad) is not known")
        return None
    found = [
        (path, src, fn, stmt, made, ids, name)
        for path, src in _files(seen)
        for fn, stmt, made, ids, name in _batch_dicts(src)
        if _entry(made, param) is None
    ]
    one = _one(
        seen,
        _in_script(seen, found),
        "no function of your files returns the batch's dict with input_ids",
        "{n} functions return a batch's dict with input_ids: which one the model is fed, the "
        "files do not say",
    )
    if one is None:
        return None
    path, src, fn, stmt, made, ids, name = one
    given = next((k.value for k in getattr(ids, "keywords", []) if k.arg == "padding_value"), None)
    pad_text = src.seg(given) if given is not None else str(pad)
    indent = src.indent(stmt)
    batch = name or src.fresh("batch", within=fn)
    mask = f'({batch}["input_ids"] {sense} {pad_text})' + (".long()" if sense == "!=" else "")
    added = f'{indent}{batch}["{param}"] = {mask}'
    if name is None:  # return {...}: the dict named, the mask added, then returned
        text = f"{batch} = {src.seg(made)}\n{added}\n{indent}return {batch}"
    else:
        text = f"{src.seg(stmt)}\n{added}"
    at = "0 at the pads" if sense == "!=" else "True at the pads"
    action = f"return {param} from the collator, {at} (token {pad})"
    return edit_of(f, src, str(path), [(stmt, text)], action)


# -- the labels ----------------------------------------------------------------------------------
def _labels_made(src: Source) -> Iterator[tuple[ast.expr, ast.expr | None]]:
    """The values labels are given that copy the token ids (``x["labels"] = ...``, ``labels =
    ...``, ``{"labels": ...}``, ``dict(labels=...)``, where the value reads ``ids``), and the
    ``attention_mask`` given beside them in the same dict, if any."""
    for n in ast.walk(src.tree):
        found: list[tuple[ast.expr, ast.expr | None]] = []
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if (isinstance(t, ast.Subscript) and _key(t.slice, "labels")) or (
                    isinstance(t, ast.Name) and t.id == "labels"
                ):
                    found.append((n.value, None))
        elif isinstance(n, ast.expr):
            entry = _entry(n, "labels")
            if entry is not None:
                found.append((entry, _entry(n, "attention_mask")))
        yield from ((v, m) for v, m in found if "ids" in src.seg(v))


def _padded_labels(src: Source) -> Iterator[ast.expr]:
    """The padding value the labels of a batch's dict are padded with, where it is not -100:
    ``{"labels": pad_sequence(ys, batch_first=True, padding_value=PAD)}``."""
    assigned = {
        t.id: n.value
        for n in ast.walk(src.tree)
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name)
    }  # the last value each name is given (targets = pad_sequence(...); {"labels": targets})
    for n in ast.walk(src.tree):
        entry = _entry(n, "labels") if isinstance(n, ast.expr) else None
        if isinstance(entry, ast.Name):
            entry = assigned.get(entry.id)
        if isinstance(entry, ast.Call) and name_of(entry) == "pad_sequence":
            given = next((k.value for k in entry.keywords if k.arg == "padding_value"), None)
            if given is not None and _signed(given) != PAD_LABEL:
                yield given


def _pads(src: Source, pad: int | None, mask: ast.expr | None) -> tuple[str, str] | None:
    """How the pads are told: (the pad token, as code; or None) and (the mask, as code), from
    the run's pad token, else from the mask beside the labels (``(ids != PAD).long()`` names
    the token; a mask by name is used as it is)."""
    if isinstance(pad, int):
        return str(pad), ""
    inner = mask
    while isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and not inner.args:
        inner = inner.func.value  # (ids != PAD).long()
    if (
        isinstance(inner, ast.Compare)
        and len(inner.ops) == 1
        and isinstance(inner.ops[0], ast.NotEq)
    ):
        return src.seg(inner.comparators[0]), ""
    if isinstance(mask, ast.Name | ast.Attribute | ast.Subscript):
        return "", src.seg(mask)
    return None


def _without_pads(src: Source, value: ast.expr, pad: str, mask: str) -> str | None:
    """``value`` with -100 at the pads, as its kind reads: a list's comprehension, a tensor's
    ``masked_fill`` (at the pad token, or where the mask is 0)."""
    inner = value
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id == "list"
        and len(value.args) == 1
        and pad
    ):
        inner = value.args[0]
        used = {n.id for n in ast.walk(inner) if isinstance(n, ast.Name)} | {pad}
        t = next(name for name in ("t", "tok", "token", "t_") if name not in used)  # its own
        return f"[{PAD_LABEL} if {t} == {pad} else {t} for {t} in {src.seg(inner)}]"
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr in ("clone", "detach")
        and not value.args
    ):
        inner = value.func.value
    if not isinstance(inner, ast.Name | ast.Attribute | ast.Subscript):
        return None  # a value computed there: masked, it would be computed twice
    text = src.seg(inner)
    where = f"{text} == {pad}" if pad else f"{mask} == 0"
    return f"{text}.masked_fill({where}, {PAD_LABEL})"


def labels_where_made(f: Finding, seen: Seen) -> Edit | None:
    """-100 at the pads where the labels are copied from the ids."""
    if not details_of(f).get("model_loss"):
        return None
    padded = [(path, src, k) for path, src in _files(seen) for k in _padded_labels(src)]
    if len(padded) == 1:  # "labels": pad_sequence(ys, padding_value=PAD): padded with -100
        path, src, given = padded[0]
        return edit_of(
            f, src, str(path), [(given, str(PAD_LABEL))],
            "labels padded with -100, which the model's loss ignores",
            objective=True,
        )  # fmt: skip
    pad = seen.meta.pad_id
    found = [(path, src, v, m) for path, src in _files(seen) for v, m in _labels_made(src)]
    one = _one(
        seen,
        _in_script(seen, found),
        "no line of your files makes the labels from the ids",
        "{n} lines make labels from the ids: which one the model is fed, the files do not say",
    )
    if one is None:
        return None
    path, src, value, mask = one
    told = _pads(src, pad, mask)
    new = _without_pads(src, value, *told) if told is not None else None
    if new is None:
        _why(seen, f"where the pads are in {src.seg(value)}, the run and the line do not say")
        return None
    return edit_of(
        f, src, str(path), [(value, new)],
        "labels -100 at the pads where they are made, which the model's loss ignores",
        objective=True,
    )  # fmt: skip


# -- the freeze ----------------------------------------------------------------------------------
def _freezes(src: Source) -> Iterator[tuple[ast.stmt, ast.For | None, bool]]:
    """The statements that set ``requires_grad`` False (``p.requires_grad = False``,
    ``p.requires_grad_(False)``), the ``for`` over parameters holding each, and whether that
    loop (or the call) takes a whole model (``model.parameters()``, not ``model.head``'s)."""
    loops = {id(s): n for n in ast.walk(src.tree) if isinstance(n, ast.For) for s in n.body}
    for n in ast.walk(src.tree):
        if isinstance(n, ast.Assign) and any(
            isinstance(t, ast.Attribute) and t.attr == "requires_grad" for t in n.targets
        ):
            off = isinstance(n.value, ast.Constant) and n.value.value is False
        elif isinstance(n, ast.Expr) and isinstance(n.value, ast.Call):
            call = n.value
            off = (
                isinstance(call.func, ast.Attribute)
                and call.func.attr == "requires_grad_"
                and bool(call.args)
                and isinstance(call.args[0], ast.Constant)
                and call.args[0].value is False
            )
        else:
            continue
        if not off:
            continue
        loop = loops.get(id(n))
        over = loop.iter if loop is not None else None
        if loop is None and isinstance(n, ast.Expr):  # model.requires_grad_(False)
            yield (
                n,
                None,
                isinstance(getattr(n.value, "func", None), ast.Attribute)
                and (
                    isinstance(n.value.func.value, ast.Name)  # type: ignore[attr-defined]
                ),
            )
            continue
        whole = (
            isinstance(over, ast.Call)
            and isinstance(over.func, ast.Attribute)
            and over.func.attr in ("parameters", "named_parameters")
            and isinstance(over.func.value, ast.Name)
        )
        yield n, loop, whole


def unfrozen(f: Finding, seen: Seen) -> Edit | None:
    """The loop that froze the whole model removed, where its only statement is the freeze;
    else the freeze's ``False`` made ``True``."""
    d = details_of(f)
    if d.get("left_out") and not d.get("idle"):
        return None  # a gradient that no optimizer applies: the optimizer's edit
    found = [(path, src, *x) for path, src in _files(seen) for x in _freezes(src)]
    found = _in_script(seen, found)
    found = [x for x in found if x[4]] if len(found) > 1 else found
    one = _one(
        seen,
        found,
        "no line of your files sets requires_grad to False: the graph is cut before them",
        "{n} lines set requires_grad to False: which one froze what must train, the files do "
        "not say",
    )
    if one is None:
        return None
    path, src, stmt, loop, _ = one
    if loop is not None and loop.body == [stmt] and not loop.orelse and _removable(src, loop):
        return _removed(f, path, src, loop, f"remove the loop that froze {src.seg(loop.iter)}")
    if loop is None and isinstance(stmt, ast.Expr) and _removable(src, stmt):
        return _removed(f, path, src, stmt, f"remove the freeze ({src.seg(stmt)})")
    off = stmt.value.args[0] if isinstance(stmt, ast.Expr) else stmt.value  # type: ignore[attr-defined]
    return edit_of(f, src, str(path), [(off, "True")], "requires_grad restored (True)")


def _removable(src: Source, stmt: ast.stmt) -> bool:
    """``stmt`` has its lines to itself and a sibling in its block: removed, the code stands."""
    first, last = stmt.lineno, stmt.end_lineno or stmt.lineno
    rest = src.lines[last - 1].encode()[stmt.end_col_offset or 0 :].decode().strip()
    alone = not src.lines[first - 1][: stmt.col_offset].strip()
    alone = alone and (not rest or rest.startswith("#"))
    bodies = (
        getattr(n, field)
        for n in ast.walk(src.tree)
        for field in ("body", "orelse", "finalbody")
        if isinstance(getattr(n, field, None), list)
    )
    return alone and any(stmt in body and len(body) > 1 for body in bodies)


def _removed(f: Finding, path: Path, src: Source, stmt: ast.stmt, action: str) -> Edit:
    first, last = stmt.lineno, stmt.end_lineno or stmt.lineno
    before = "\n".join(src.lines[first - 1 : last])
    return Edit(f.kind, str(path), first, before, (), action, end=last if last > first else None)


# -- the init scale -----------------------------------------------------------------------------
_NORMALS = {"normal_", "trunc_normal_"}
_ZEROS = {"zeros_", "zero_"}


def _scale_changes(src: Source) -> list[Replace]:
    """The inits of ``src`` at a scale no layer of a trained model starts at: a normal's std
    written as a number above :data:`TOO_WIDE`, a weight set to 0 (``zeros_(m.weight)``), a
    weight multiplied after its init (``w.data *= 10``)."""
    changes: list[Replace] = []
    for n in ast.walk(src.tree):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute | ast.Name):
            name = n.func.attr if isinstance(n.func, ast.Attribute) else n.func.id
            if name in _NORMALS:
                method = isinstance(n.func, ast.Attribute) and "init" not in src.seg(n.func)
                std = next((k.value for k in n.keywords if k.arg == "std"), None)
                positional = n.args[1:] if method else n.args[2:]
                std = std if std is not None else (positional[0] if positional else None)
                wide = _number(std)
                weight = n.args[0] if n.args and not method else getattr(n.func, "value", None)
                if std is not None and wide is not None and wide > TOO_WIDE and weight:
                    changes.append((std, _fan_in_std(src, weight)))
            elif name in _ZEROS and _weight(n, src):
                of = n.args[0] if n.args else getattr(n.func, "value", n.func)
                target = src.seg(of)
                func = src.seg(n.func)
                std_text = _fan_in_std(src, of)
                if n.args:
                    prefix = func[: len(func) - len(name)]
                    call = f"{prefix}normal_({target}, mean=0.0, std={std_text})"
                else:
                    call = f"{target}.normal_(mean=0.0, std={std_text})"
                changes.append((n, call))
        elif isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Mult):
            k = _number(n.value)
            if k is not None and k >= 2 and "weight" in src.seg(n.target) and _removable(src, n):
                changes.append((n, _GONE))  # its line removed: the weights keep their init's
    return changes


def _fan_in_std(src: Source, weight: ast.expr) -> str:
    """1/sqrt(fan in) of ``weight``, as code: its first row's size is its fan in for a linear
    layer's (out, in), a convolution's (out, in, k, k) and an embedding's (rows, width) alike
    (LeCun's normal init, the scale that keeps a layer's output at its input's)."""
    w = src.seg(weight)
    if w.endswith(".data"):
        w = w[: -len(".data")]
    return f"{w}[0].numel() ** -0.5"


_GONE = "\x00gone\x00"
"""Put in place of a statement whose line is removed whole (its comment with it)."""


def _number(e: ast.expr | None) -> float | None:
    value = e.value if isinstance(e, ast.Constant) else None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _weight(call: ast.Call, src: Source) -> bool:
    """The call sets a weight (not a bias) to 0."""
    target = call.args[0] if call.args else getattr(call.func, "value", None)
    return target is not None and "weight" in src.seg(target)


def init_scaled(f: Finding, seen: Seen) -> Edit | None:
    """The weights' init at a trainable scale, where the user's files init them at one no
    model trains from (a finding of a poor initialisation, or whose first hypothesis is the
    initialisation)."""
    first = f.hypotheses[0].family if f.hypotheses else None
    if f.kind != "poor_initialization" and first is not Family.INITIALIZATION:
        return None
    found = [(path, src, c) for path, src in _files(seen) if (c := _scale_changes(src))]
    one = _one(
        seen,
        _in_script(seen, found),
        "no init in your files writes a scale too wide (a normal's std above 0.2, a weight set "
        "to 0, a weight multiplied after its init)",
        "inits too wide in {n} files: which one made the model, the files do not say",
    )
    if one is None:
        return None
    path, src, changes = one
    edit = edit_of(f, src, str(path), changes, "initialise the weights at a trainable scale")
    if edit is None:
        return None
    kept = tuple(t for t in edit.after if _GONE not in t)  # a statement removed: its line too
    return replace(edit, after=kept)


# -- a term's sign -------------------------------------------------------------------------------
def _terms(e: ast.expr, sign: int = 1) -> Iterator[tuple[int, ast.expr]]:
    """The additive terms of ``e`` with their signs: ``1 + a - b`` -> (+1, 1), (+1, a), (-1, b)."""
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Add | ast.Sub):
        yield from _terms(e.left, sign)
        yield from _terms(e.right, sign if isinstance(e.op, ast.Add) else -sign)
    elif isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        yield from _terms(e.operand, -sign)
    else:
        yield sign, e


def _exp_of(e: ast.expr) -> ast.expr | None:
    """``x`` of ``torch.exp(x)`` or ``x.exp()``."""
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "exp":
        return e.args[0] if e.args else e.func.value
    return None


def _reduced(call: ast.Call) -> ast.expr | None:
    """What a ``sum``/``mean`` reduces: ``x`` of ``torch.sum(x, 1)`` and of ``x.sum(1)``."""
    if name_of(call) not in ("sum", "mean"):
        return None
    func = call.func
    if isinstance(func, ast.Attribute) and not (
        isinstance(func.value, ast.Name) and func.value.id in ("torch", "np", "numpy")
    ):
        return func.value
    return call.args[0] if call.args else None


def _gaussian_kl(e: ast.expr) -> bool:
    """``1 + logvar - mu**2 - exp(logvar)``, in any order: the terms of a Gaussian's KL
    divergence from N(0, 1), which is ``-0.5 *`` their sum (never below 0)."""
    terms = list(_terms(e))
    exps = [x for sign, t in terms if sign < 0 and (x := _exp_of(t)) is not None]
    plain = {ast.dump(t) for sign, t in terms if sign > 0}
    one = any(sign > 0 and isinstance(t, ast.Constant) and t.value == 1 for sign, t in terms)
    negative = sum(sign < 0 for sign, _ in terms)
    return (
        len(terms) == 4
        and one
        and negative == 2
        and len(exps) == 1
        and (ast.dump(exps[0]) in plain)
    )


def _factors(e: ast.expr) -> Iterator[ast.expr]:
    """The factors of a product: ``beta * 0.5 * x`` -> beta, 0.5, x."""
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Mult):
        yield from _factors(e.left)
        yield from _factors(e.right)
    else:
        yield e


def _signed(k: ast.expr) -> float | None:
    """A number written in the code, its minus sign included (``-0.5``)."""
    if isinstance(k, ast.UnaryOp) and isinstance(k.op, ast.USub):
        inner = _number(k.operand)
        return -inner if inner is not None else None
    return _number(k)


_SCALED = "scaled"
"""The KL term is divided by a number: negated itself, its scale kept."""


def _kl_flipped(src: Source) -> list[Replace]:
    """Each Gaussian KL term the file writes with its sign flipped (``0.5 * torch.sum(1 +
    logvar - mu.pow(2) - logvar.exp())``, by the numbers and minus signs around it): the
    nearest number it is multiplied by negated, the term negated where it is divided by one,
    ``-0.5 *`` put before it where there is neither."""
    changes: list[Replace] = []

    def visit(e: ast.AST, sign: int, near: ast.expr | str | None) -> None:
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
            visit(e.operand, -sign, near)
        elif isinstance(e, ast.BinOp) and isinstance(e.op, ast.Mult):
            factors = list(_factors(e))
            numbers = [k for k in factors if _signed(k)]
            for k in numbers:
                sign = -sign if (_signed(k) or 0) < 0 else sign
            for other in factors:
                if other not in numbers:
                    visit(other, sign, numbers[-1] if numbers else near)
        elif isinstance(e, ast.BinOp) and isinstance(e.op, ast.Sub):
            visit(e.left, sign, None)
            visit(e.right, -sign, None)
        elif isinstance(e, ast.BinOp) and isinstance(e.op, ast.Div) and _signed(e.right):
            visit(e.left, -sign if (_signed(e.right) or 0) < 0 else sign, _SCALED)
            visit(e.right, sign, None)
        elif isinstance(e, ast.Call) and (reduced := _reduced(e)) is not None:
            if _gaussian_kl(reduced):
                if sign > 0 and isinstance(near, ast.expr):
                    changes.append((near, f"-{src.seg(near)}"))
                elif sign > 0:
                    minus = "-" if near == _SCALED else "-0.5 * "
                    changes.append((e, f"{minus}{src.seg(e)}"))
                return
            for child in ast.iter_child_nodes(e):  # x.sum(1).mean(): the scale reaches x
                visit(child, sign, near)
        else:
            keep = isinstance(e, ast.Attribute)  # the receiver of a reduction
            for child in ast.iter_child_nodes(e):
                visit(child, sign, near if keep else None)

    visit(src.tree, 1, None)
    subtracted = {  # kl = 0.5 * sum(...); loss = rec - kl: the sign is given where it is used
        n.id
        for e in ast.walk(src.tree)
        if isinstance(e, ast.BinOp | ast.UnaryOp) and isinstance(e.op, ast.Sub | ast.USub)
        for n in ast.walk(e.right if isinstance(e, ast.BinOp) else e.operand)
        if isinstance(n, ast.Name)
    }
    held = {
        id(x): {t.id for t in a.targets if isinstance(t, ast.Name)}
        for a in ast.walk(src.tree)
        if isinstance(a, ast.Assign)
        for x in ast.walk(a.value)
    }
    return [(n, t) for n, t in changes if not held.get(id(n), set()) & subtracted]


def kl_sign(f: Finding, seen: Seen) -> Edit | None:
    """A loss with no minimum, in a program whose files write a Gaussian's KL term with its
    sign flipped: the sign restored (``0.5 * torch.sum(...)`` -> ``-0.5 * torch.sum(...)``)."""
    found = [(path, src, c) for path, src in _files(seen) if (c := _kl_flipped(src))]
    one = _one(
        seen,
        _in_script(seen, found),
        "no term of the loss reads as one written with its sign flipped",
        "KL terms with their sign flipped in {n} files: which one the loss is, the files do not "
        "say",
    )
    if one is None:
        return None
    path, src, changes = one
    return edit_of(
        f, src, str(path), changes, "the KL term's sign: -0.5 * sum(1 + logvar - mu² - e^logvar)",
        objective=True,
    )  # fmt: skip
