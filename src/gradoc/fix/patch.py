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
  clamped to ``1e-6``, where the line holds exactly one such operand (``max(d, 1e-6)`` for a
  Python number the replay saw divide).
- ``eval_mode``: ``model.train()`` before the line that calls the model with gradients
  (``meta.forward_at``: the line and the variable holding the model there).
- ``loss_on_probabilities``: the softmax the loss's input went through made a
  ``log_softmax`` (for ``nll_loss``) or removed (for a loss that applies its own), where the
  user's files hold exactly one.
- ``loss_includes_padding``: the labels given to the model -100 at the pads
  (``labels=ids.masked_fill(mask == 0, -100)``), where the model is called.
- ``padding_leak`` (seen in the inputs): the mask the model takes, given where it is called,
  from its pad token.
- ``loss_unbounded``: a loss whose last operation subtracts a term (``loss = rec - kl``) adds
  it, at the assignment of the variable that ``backward()`` was called on
  (``meta.loss_fn.at``).
- ``frozen_parameters`` (left out of the optimizer): the optimizer given the whole model where
  it was given a part (``Adam(net.head.parameters())`` -> ``Adam(net.parameters())``).

- ``weight_decay_dominates``: the weight decay scaled where the optimizer is made.
- ``game_stopped``: the faster of a game's two optimizers given the other's rate, where it is
  made (``lr=d_lr`` -> ``lr=d_lr * 0.01``).
- ``loss_on_probabilities`` with a sigmoid the model applies in every layer: the loss on
  probabilities (``nn.BCEWithLogitsLoss()`` -> ``nn.BCELoss()``).
- a learning rate too high in a program that makes no optimizer: its flag's default, where
  the script declares it.
- a ``nonfinite`` clamp whose floor is far below the operand's smallest non-zero size is not
  written (:data:`FAR`): it would move the result by orders of magnitude, no repair.

Where the cause is written elsewhere than the line the run located (a collator's dict, labels
made from the ids, a freeze loop, an init, a KL term), ``fix.made`` writes the edit there; a
causal mask that hides a whole row is turned round by ``fix.causal``.

An edit that changes what the loss computes (``Edit.objective``) is judged without comparing
the two runs' losses, which are different quantities.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._util.json_types import JsonObject
from ..detect.finding import CodeLine, Family, Finding, Origin
from ..locate.mechanism import NO_IDIOM, SMALLEST
from ..locate.replay import NUMBER_DENOMINATOR
from ..store.meta import RunMeta
from .edit import Edit, EditFailed
from .idiom import idiom_edit
from .made import collated_mask, init_scaled, kl_sign, labels_where_made, unfrozen
from .source import Seen, edit_of, parsed
from .source import details_of as _details

__all__ = ["Edit", "EditFailed", "Seen", "edit_for", "lr_edit"]


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

    def edit(self, f: Finding, lines: tuple[str, ...], action: str, **more: Any) -> Edit:
        """This line replaced by ``lines``, for ``f``."""
        return Edit(f.kind, self.file, self.line, self.text, lines, action, **more)

    def becomes(self, f: Finding, stripped: str, action: str, **more: Any) -> Edit:
        """This line replaced by ``stripped`` at its indentation, for ``f``."""
        return self.edit(f, (self.indent + stripped,), action, **more)


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


def _zero_clip(f: Finding, seen: Seen) -> Edit | None:
    where = _fixed_at(f)
    if where is None:
        return None
    tree, indent = where.tree, where.indent
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
        return where.becomes(f, new, action)
    # a threshold read from somewhere: 0 meant "off", so the call is skipped at 0
    if not (isinstance(tree.body[0], ast.Expr) and tree.body[0].value is call):
        return None  # the call's result is used: skipping it would change more than the clip
    threshold = ast.get_source_segment(stripped, arg)
    guarded = (f"{indent}if {threshold} > 0:  # 0 means no clipping", f"{indent}    {stripped}")
    return where.edit(f, guarded, f"skip the clip while {threshold} is not positive")


def _name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _replaced(source: str, node: ast.expr, text: str) -> str:
    """``source`` (one line) with ``node``'s segment replaced by ``text`` (ast's offsets
    count UTF-8 bytes)."""
    raw, start, end = source.encode(), node.col_offset, node.end_col_offset
    assert end is not None
    return (raw[:start] + text.encode() + raw[end:]).decode()


def _zero_grad(f: Finding, seen: Seen) -> Edit | None:
    """``optimizer.zero_grad()`` inserted after the line that steps the optimizer whose
    gradients were kept (right for a plain loop and for gradient accumulation alike): the
    variable is the one the run found holding it there, else the receiver of the line's only
    ``.step()`` call."""
    where = _fixed_at(f)
    if where is None:
        return None
    text, tree = where.text, where.tree
    if not _simple(tree):
        return None  # ``for ...: opt.step()``: the next line is not in the same block
    receivers = {
        ast.unparse(n.func.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "step"
    }
    if not receivers:
        return None  # not the line that steps: a zero_grad() after it could undo the update
    name = _details(f).get("optimizer")
    if not isinstance(name, str) or not name.isidentifier():
        if len(receivers) != 1:
            return None
        (name,) = receivers
    top = _loop_top(where) if len(seen.meta.optimizers) > 1 else None
    if top is not None:  # a game: the other optimizer's backward reaches these parameters too
        added = f"{top.indent}{name}.zero_grad()  # this step's backward() starts from no gradient"
        return top.edit(f, (added, top.text), f"clear {name}'s gradients as its step's loop begins")
    indent = where.indent
    added = f"{indent}{name}.zero_grad()  # the next backward() starts from no gradient"
    return where.edit(f, (text, added), f"clear {name}'s gradients after its step")


def _loop_top(where: Located) -> Located | None:
    """The first statement of the innermost loop around ``where`` (the step's line), where it
    is on a line of its own. In a program of two optimizers (a GAN) the generator's backward
    leaves gradients in the discriminator's parameters: cleared after the discriminator's step,
    they come back before its next one; cleared as its loop begins, they do not."""
    try:
        tree = ast.parse(Path(where.file).read_text())
    except (OSError, SyntaxError, ValueError):
        return None
    loops = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.For | ast.While) and n.lineno < where.line <= (n.end_lineno or 0)
    ]
    if not loops:
        return None
    first = max(loops, key=lambda n: n.lineno).body[0]
    if first.lineno == where.line or (first.end_lineno or first.lineno) != first.lineno:
        return None
    return _located(CodeLine(where.file, first.lineno, None))


def _simple(tree: ast.Module) -> bool:
    """A line of simple statements only: a line put before or after it is in its block."""
    simple = (ast.Expr, ast.Assign, ast.AnnAssign, ast.AugAssign)
    return all(isinstance(node, simple) for node in tree.body)


def _train_mode(f: Finding, seen: Seen) -> Edit | None:
    """``model.train()`` before the line that calls the model with gradients
    (``meta.forward_at``, and the variable holding the model there): whatever put it in
    eval() before (a validation pass, a call before the loop), each training forward then
    runs in training mode."""
    where = _located(CodeLine.from_json(seen.meta.forward_at or {}))
    name = seen.meta.forward_model
    if where is None or name is None or not name.isidentifier():
        return None
    text = where.text
    if not _simple(where.tree):
        return None
    added = f"{where.indent}{name}.train()  # BatchNorm and dropout as in training"
    action = f"put {name} in training mode first"
    return where.edit(f, (added, text), action, objective=True)


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


def _nonfinite(f: Finding, seen: Seen) -> Edit | None:
    """The stable idiom of the mechanism that made the NaN/Inf (``fix.idiom``), written in
    place of the expression the run located; where its mechanism has no idiom, the unsafe
    operand of the op clamped to :data:`EPS`: ``pos / span`` -> ``pos /
    span.clamp_min(1e-6)``. A mechanism whose idiom cannot be written here gets no clamp (a
    clamp is no repair of an underflow: log(1e-6) where the value is -10,000)."""
    origin = f.origin
    if origin is None or not origin.op or not origin.file or origin.line is None:
        return None
    mechanism = origin.mechanism
    if mechanism is not None and mechanism.name not in NO_IDIOM:
        edit = idiom_edit(f, origin)
        if edit is not None or mechanism.name != "zero_length":
            return edit  # a length's divisor of 0 (the demo's) is guarded by the clamp below
    family = _op_family(origin.op)
    where = _located(CodeLine(origin.file, origin.line, origin.code))
    if family is None or where is None:
        return None
    stripped = where.stripped
    operands = [o for o in _operands(where.tree, family) if not isinstance(o, ast.Constant)]
    if len(operands) != 1:
        return None  # none, or several: which one, the line does not say
    (operand,) = operands
    seg = ast.get_source_segment(stripped, operand)
    if seg is None:
        return None
    far = _far_from_seen(origin)
    if far is not None:
        seen.why.append(
            f"a floor of {EPS} under {seg}, whose smallest non-zero size was {far:.3g}, would "
            f"move the result where it was 0 {far / float(EPS):.0e}x past anything the program "
            "computed: no repair; find why it is 0"
        )
        return None
    if any(r.signal == NUMBER_DENOMINATOR for r in origin.evidence):
        clamped = f"max({seg}, {EPS})"  # a Python number: no tensor method
    else:
        clamped = f"{_operand(stripped, operand)}.clamp_min({EPS})"
    return where.becomes(f, _replaced(stripped, operand, clamped), f"clamp {seg} to at least {EPS}")


FAR = 1e3
"""A clamp whose floor is this many times below the operand's smallest non-zero size is too
far from the values the program saw to be a repair (a divisor of 0.5 or 0 floored at 1e-6: the
result where it was 0 is 500,000x anything computed)."""


def _far_from_seen(origin: Origin) -> float | None:
    """The operand's smallest non-zero size, where the mechanism read it and the clamp's floor
    is :data:`FAR` times below it; else None."""
    readings = origin.mechanism.evidence if origin.mechanism is not None else []
    smallest = [r.value for r in readings if r.signal.startswith(SMALLEST.split("{")[0])]
    value = smallest[0] if smallest and isinstance(smallest[0], (int, float)) else None
    return float(value) if value is not None and value > FAR * float(EPS) else None


_SQUASH = {"probabilities": "softmax", "softmax": "softmax", "sigmoid": "sigmoid"}
"""``meta.loss_fn.fed`` -> the function the loss's input went through."""


def _unsquashed(f: Finding, seen: Seen) -> Edit | None:
    """The softmax (or sigmoid) the loss's input went through, where the user's files hold
    exactly one: made a ``log_softmax`` for ``nll_loss`` (``F.softmax`` -> ``F.log_softmax``,
    ``nn.Softmax`` -> ``nn.LogSoftmax``), removed for a loss that applies its own
    (``nn.Softmax(dim=1)`` -> ``nn.Identity()``, ``torch.sigmoid(x)`` -> ``x``). Found by
    reading the files (the autograd graph says which function, not where): a second softmax
    anywhere (an accuracy's) and there is no edit."""
    fed = str(_details(f).get("fed"))
    squash = _SQUASH.get(fed)
    if squash is None:
        return None
    found = _calls_in(seen.sources, squash)
    if len(found) != 1:
        return None
    (where, call), stripped = found[0], found[0][0].stripped
    func = ast.get_source_segment(stripped, call.func) or ""
    layer = _name(call.func)[:1].isupper()  # nn.Softmax(dim=1): a layer
    if fed == "probabilities":
        log = "LogSoftmax" if layer else "log_softmax"
        new = _replaced(stripped, call.func, func[: len(func) - len(squash)] + log)
        action = "log_softmax in place of softmax, as nll_loss expects"
    else:
        if layer:
            kept = func[: len(func) - len(squash)] + "Identity()"
        else:
            inner = _squashed_input(call)
            if inner is None:
                return None
            kept = ast.get_source_segment(stripped, inner) or ""
        new = _replaced(stripped, call, kept)
        action = f"no {squash} before a loss that applies its own (it takes logits)"
    return where.becomes(f, new, action, objective=True)


_ON_PROBABILITIES = {
    "BCEWithLogitsLoss": "BCELoss",
    "binary_cross_entropy_with_logits": "binary_cross_entropy",
}
"""A loss on logits and the same loss on probabilities."""


def _loss_on_what_it_gets(f: Finding, seen: Seen) -> Edit | None:
    """A sigmoid the model applies more than once (an activation it uses in every layer, the
    last included), its output given to a loss on logits: the loss on probabilities instead
    (``nn.BCEWithLogitsLoss()`` -> ``nn.BCELoss()``), where the user's files make exactly one
    such loss."""
    if str(_details(f).get("fed")) != "sigmoid":
        return None
    found = [(n, x) for n in _ON_PROBABILITIES for x in _calls_in(seen.sources, n.lower())]
    if len(found) != 1:
        return None
    name, (where, call) = found[0]
    func = ast.get_source_segment(where.stripped, call.func) or ""
    new = _replaced(
        where.stripped, call.func, func[: len(func) - len(name)] + _ON_PROBABILITIES[name]
    )
    action = f"{_ON_PROBABILITIES[name]}, the loss on the probabilities the model outputs"
    return where.becomes(f, new, action, objective=True)


_FUNCTIONS = frozenset({"torch", "F", "nn", "functional", "special"})
"""Names a softmax is called on as a function (``F.softmax(x)``), not as a method
(``x.softmax()``)."""


def _squashed_input(call: ast.Call) -> ast.expr | None:
    """What a softmax or sigmoid call is applied to: ``x`` of ``F.softmax(x, 1)``,
    ``torch.sigmoid(x)``, ``x.softmax(-1)`` and ``softmax(x)``."""
    func = call.func
    if isinstance(func, ast.Attribute) and _name(func.value) not in _FUNCTIONS:
        return func.value  # a method of the tensor
    return call.args[0] if call.args else None


def _calls_in(sources: Sequence[Path], name: str) -> list[tuple[Located, ast.Call]]:
    """The calls of ``name`` (``softmax``: ``F.softmax``, ``x.softmax``, ``nn.Softmax``) in
    ``sources``, each on a line that parses alone, with the line."""
    found = []
    for path in sources:
        try:
            tree = ast.parse(path.read_text())
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or _name(node.func).lower() != name:
                continue
            where = _located(CodeLine(str(path), node.lineno, None))
            same = ast.dump(node)
            calls = ast.walk(where.tree) if where is not None else iter(())
            call = next((c for c in calls if isinstance(c, ast.Call) and ast.dump(c) == same), None)
            if where is None or call is None:
                return []  # a call over several lines: where it is, no edit is sure of
            found.append((where, call))
    return found


def _model_call(seen: Seen) -> tuple[Located, ast.Call] | None:
    """The line that calls the model with gradients (``meta.forward_at``) and its call of the
    model there (``model(...)``, through the variable the run found holding it)."""
    where = _located(CodeLine.from_json(seen.meta.forward_at or {}))
    name = seen.meta.forward_model
    if where is None or name is None:
        return None
    calls = [
        n
        for n in ast.walk(where.tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name
    ]
    return (where, calls[0]) if len(calls) == 1 else None


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _token_ids(call: ast.Call) -> ast.expr | None:
    """The token ids a Hugging Face style call is given (``input_ids=`` or its first
    argument)."""
    given = _keyword(call, "input_ids")
    return given if given is not None else (call.args[0] if call.args else None)


def _operand(source: str, node: ast.expr) -> str:
    """``node``'s text, in parentheses unless it is a name, an attribute, a call or an index."""
    text = ast.get_source_segment(source, node) or ""
    simple = isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript))
    return text if simple else f"({text})"


def _masked_labels(f: Finding, seen: Seen) -> Edit | None:
    """Labels that score the pads, given to the model (``model(ids, labels=ids)``): -100 at
    the padded positions, which a Hugging Face model's loss ignores, where the model is called
    (``labels=ids`` -> ``labels=ids.masked_fill(mask == 0, -100)``, by the call's own mask,
    else by the model's pad token)."""
    found = _model_call(seen)
    if found is None or not _details(f).get("model_loss"):
        return None
    where, call = found
    stripped = where.stripped
    labels = _keyword(call, "labels")
    mask = _keyword(call, "attention_mask")
    pad = seen.meta.pad_id
    ids = _token_ids(call)
    if labels is None:
        return None
    if mask is not None:
        pads = f"{_operand(stripped, mask)} == 0"
    elif isinstance(pad, int) and ids is not None:
        pads = f"{_operand(stripped, ids)} == {pad}"
    else:
        return None
    new = _replaced(stripped, labels, f"{_operand(stripped, labels)}.masked_fill({pads}, -100)")
    return where.becomes(
        f, new, "labels -100 at the pads, which the model's loss ignores", objective=True
    )


def _mask_given(f: Finding, seen: Seen) -> Edit | None:
    """A model fed pads with no mask, although it takes one (``model(ids)``): the mask given
    where it is called, from the model's pad token
    (``attention_mask=(ids != 0).long()``)."""
    d = _details(f)
    pad, param = seen.meta.pad_id, d.get("mask_param")
    found = _model_call(seen)
    if d.get("seen") != "inputs" or not isinstance(pad, int) or found is None:
        return None
    where, call = found
    stripped = where.stripped
    ids = _token_ids(call)
    if ids is None or not isinstance(param, str) or _keyword(call, param) is not None:
        return None
    if any(k.arg is None for k in call.keywords):
        return None  # model(**batch): the mask may be in it
    text = ast.get_source_segment(stripped, call) or ""
    inner = text[: text.rstrip().rindex(")")].rstrip().rstrip(",")
    if param == "attention_mask":  # Hugging Face's: 1 at a real token
        mask = f"({_operand(stripped, ids)} != {pad}).long()"
    elif param.endswith("key_padding_mask"):  # nn.MultiheadAttention's: True at a pad
        mask = f"{_operand(stripped, ids)} == {pad}"
    else:
        return None  # a mask whose sense the name does not say
    given = f"{inner}, {param}={mask})"
    new = _replaced(stripped, call, given)
    return where.becomes(f, new, f"pass {param}, 0 at the pads (token {pad})")


def _term_sign(f: Finding, seen: Seen) -> Edit | None:
    """A loss minimised without bound whose last operation is a subtraction (its autograd node
    ``SubBackward0``, ``loss = recon - kl``): the subtracted term added instead, at the line
    that assigns the loss last before its ``backward()`` in the same file
    (``meta.loss_fn.at``: the backward's line and the variable holding the loss)."""
    at = seen.meta.loss_at
    if at is None or at.node != "SubBackward0":
        return None
    name, file, line = at.loss, at.file, at.line
    try:
        tree = ast.parse(Path(file).read_text())
    except (OSError, SyntaxError, ValueError):
        return None
    assigns = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign)
        and n.lineno < line
        and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)
    ]
    if not assigns:
        return None
    last = max(assigns, key=lambda n: n.lineno)
    where = _located(CodeLine(file, last.lineno, None))
    if where is None or not isinstance(where.tree.body[0], ast.Assign):
        return None
    value = where.tree.body[0].value
    if not (isinstance(value, ast.BinOp) and isinstance(value.op, ast.Sub)):
        return None
    stripped = where.stripped
    left = ast.get_source_segment(stripped, value.left) or ""
    right = ast.get_source_segment(stripped, value.right) or ""
    new = _replaced(stripped, value, f"{left} + {right}")
    return where.becomes(
        f, new, f"add {right} to the loss instead of subtracting it", objective=True
    )


def _all_parameters(f: Finding, seen: Seen) -> Edit | None:
    """Parameters a gradient reaches that no optimizer holds, where the optimizer was given
    one part of the model (``Adam(model.head.parameters())``): the whole model's given
    instead, where the optimizer is made (``Adam(model.parameters())``)."""
    d = _details(f)
    if not d.get("left_out") or d.get("idle") or d.get("models"):
        return None
    where = _made_at(seen.meta)
    if where is None:
        return None
    stripped = where.stripped
    made = _constructors(where) or [
        n for n in ast.walk(where.tree) if isinstance(n, ast.Call) and _name(n.func)[:1].isupper()
    ]
    if len(made) != 1 or not made[0].args:
        return None
    params = made[0].args[0]
    if not (
        isinstance(params, ast.Call)
        and isinstance(params.func, ast.Attribute)
        and params.func.attr == "parameters"
        and isinstance(params.func.value, ast.Attribute)
    ):
        return None
    base: ast.expr = params.func.value
    while isinstance(base, ast.Attribute):
        base = base.value
    model = seen.meta.forward_model
    if not isinstance(base, ast.Name) or (model is not None and base.id != model):
        return None
    new = _replaced(stripped, params, f"{base.id}.parameters()")
    part = ast.get_source_segment(stripped, params.func.value)
    return where.becomes(
        f, new, f"give the optimizer all of {base.id}'s parameters, not {part}'s alone"
    )


def _decay_lowered(f: Finding, seen: Seen) -> Edit | None:
    """A weight decay that outweighs the gradient, scaled where the optimizer is made by the
    finding's factor: ``weight_decay=10.0`` -> ``weight_decay=0.1``,
    ``weight_decay=args.wd`` -> ``weight_decay=args.wd * 0.01``."""
    factor = _details(f).get("factor")
    made = _optimizer_call(seen.meta)
    if not isinstance(factor, (int, float)) or made is None:
        return None
    where, call = made
    given = _keyword(call, "weight_decay")
    if given is None:
        return None  # given by position, or by a dict of groups: where, the line does not say
    new = _replaced(where.stripped, given, _times(where.stripped, given, factor))
    return where.becomes(f, new, f"weight_decay x{factor:g} where the optimizer is made")


SMALL_EPS = "1e-15"
"""The epsilon an Adam whose gradients fell under its own is given (Wortsman et al. 2023)."""


def _eps_lowered(f: Finding, seen: Seen) -> Edit | None:
    """An Adam epsilon above the gradients' scale, set to :data:`SMALL_EPS` where the optimizer
    is made: ``eps=1e-8`` -> ``eps=1e-15``, and ``AdamW(ps, lr=1e-3)`` ->
    ``AdamW(ps, lr=1e-3, eps=1e-15)`` where it was left at its default."""
    made = _optimizer_call(seen.meta)
    if made is None or len(made[1].args) > 3:
        return None  # eps given by position (the fourth argument), or the line not known
    where, call = made
    text = where.stripped
    given = _keyword(call, "eps")
    if given is not None:
        new = _replaced(text, given, SMALL_EPS)
    elif call.end_col_offset is not None and text[call.end_col_offset - 1] == ")":
        end = call.end_col_offset - 1
        new = text[:end].rstrip().rstrip(",") + f", eps={SMALL_EPS}" + text[end:]
    else:
        return None
    return where.becomes(f, new, f"eps={SMALL_EPS} where the optimizer is made")


GAME_RATIO = 10
"""Two optimizers of a game whose rates differ this much or more: the faster one's is lowered
to the slower one's (``game_stopped``: a discriminator at 100x its generator's rate)."""


def _rates_evened(f: Finding, seen: Seen) -> Edit | None:
    """A game that stopped, its first hypothesis a rate too high, in a program with two
    optimizers whose rates differ :data:`GAME_RATIO` times or more: the faster one's rate
    scaled to the slower one's where it is made (``lr=d_lr`` -> ``lr=d_lr * 0.01``)."""
    first = f.hypotheses[0].family if f.hypotheses else None
    rated = [(lr, o) for lr, o in zip(seen.meta.rates, seen.meta.optimizers) if lr is not None]
    if first is not Family.LEARNING_RATE or len(rated) != 2:
        return None
    (slow, _), (fast, made_by) = sorted(rated, key=lambda r: r[0])
    factor = slow / fast
    made = _optimizer_call(seen.meta, made_by)
    if factor > 1 / GAME_RATIO or made is None:
        return None
    where, call = made
    rate = _rate(call)
    assert rate is not None
    new = _replaced(where.stripped, rate, _times(where.stripped, rate, factor))
    action = f"the faster optimizer's learning rate x{factor:.3g}, to the other's"
    return where.becomes(f, new, action)


Writer = Callable[[Finding, Seen], Edit | None]


def _first(*writers: Writer) -> Writer:
    """The edit of the first writer that writes one (where the run called the model, then
    where the value was made)."""

    def write(f: Finding, seen: Seen) -> Edit | None:
        return next((e for w in writers if (e := w(f, seen)) is not None), None)

    return write


WRITERS: dict[str, Writer] = {
    "nonfinite": _nonfinite,
    "zero_clip": _zero_clip,
    "accumulating_gradients": _zero_grad,
    "eval_mode": _train_mode,
    "loss_on_probabilities": _first(_unsquashed, _loss_on_what_it_gets),
    "loss_includes_padding": _first(_masked_labels, labels_where_made),
    "padding_leak": _first(_mask_given, collated_mask),
    "loss_unbounded": _first(_term_sign, kl_sign),
    "frozen_parameters": _first(_all_parameters, unfrozen),
    "weight_decay_dominates": _decay_lowered,
    "adam_epsilon": _eps_lowered,
    "game_stopped": _rates_evened,
}
"""The finding kinds whose code fix gradoc writes as an edit."""


def _lr_scaled(f: Finding, seen: Seen) -> Edit | None:
    return lr_edit(f, seen.meta)


def lr_edit(f: Finding, meta: RunMeta, factor: float | None = None) -> Edit | None:
    """A finding whose fix scales the learning rate (``lr_scale``): the rate given where the
    program constructs its optimizer (``meta.optimizers[i].at``, seen by ``gradoc run``),
    scaled there: ``lr=0.5`` -> ``lr=0.05``, ``lr=args.lr`` -> ``lr=args.lr * 0.1``. Unlike
    the no-code remedy it reaches an optimizer that keeps its own copy of the rate.
    ``factor``: another scale than the finding's fix asks for (a second try, further down)."""
    asked = next((x.apply["lr_scale"] for x in f.fixes if x.apply and "lr_scale" in x.apply), None)
    factor = factor if factor is not None and asked is not None else asked
    made = _optimizer_call(meta)
    if not isinstance(factor, (int, float)):
        return None
    if made is None:
        return _default_scaled(f, meta, factor)
    where, call = made
    rate = _rate(call)
    assert rate is not None
    return where.becomes(
        f,
        _replaced(where.stripped, rate, _times(where.stripped, rate, factor)),
        f"the learning rate x{factor:g} where the optimizer is made",
        remedy="lr_scale",
        scale=factor,
    )


_RATES = {"lr", "learning_rate", "learning-rate", "learningrate"}
"""The names of a flag that sets the learning rate itself (not a bound of its schedule)."""


def _default_scaled(f: Finding, meta: RunMeta, factor: float) -> Edit | None:
    """A program that makes no ``torch.optim`` optimizer (an update written by hand): the
    default of its learning-rate flag scaled, where the script declares it
    (``parser.add_argument("--lr", type=float, default=20)`` -> ``default=2``), the one
    flag of a learning rate it declares with a number for a default."""
    script = Path(meta.script).resolve() if meta.script else None  # as gradoc run was given it
    src = parsed(script) if script is not None else None
    if src is None:
        return None
    found = [
        d
        for n in ast.walk(src.tree)
        if isinstance(n, ast.Call)
        and _name(n.func) == "add_argument"
        and any(isinstance(a, ast.Constant) and str(a.value).lstrip("-") in _RATES for a in n.args)
        and isinstance(d := _keyword(n, "default"), ast.Constant)
        and isinstance(d.value, (int, float))
    ]
    if len(found) != 1:
        return None
    (default,) = found
    value = default.value
    assert isinstance(value, (int, float))
    new = f"{value * factor:.3g}"
    return edit_of(
        f, src, str(script), [(default, new)],
        f"the learning rate's default x{factor:g} where the script declares its flag",
        remedy="lr_scale", scale=factor,
    )  # fmt: skip


def _made_at(meta: RunMeta, which: JsonObject | None = None) -> Located | None:
    """The line that constructs the program's optimizer (``meta.optimizers[i].at``, seen by
    ``gradoc run``; ``which``: that optimizer's, else the first's), as the file holds it
    now."""
    made = [which] if which is not None else meta.optimizers
    return _located(next((CodeLine.from_json(o.get("at")) for o in made if o.get("at")), None))


def _optimizer_call(
    meta: RunMeta, which: JsonObject | None = None
) -> tuple[Located, ast.Call] | None:
    """The line that constructs the program's optimizer (``which``, else the first) and its
    constructor's call, where the line holds exactly one (``opt = AdamW(ps, lr=1e-3)``); None
    elsewhere."""
    where = _made_at(meta, which)
    calls = _constructors(where) if where is not None else []
    return (where, calls[0]) if where is not None and len(calls) == 1 else None


def _constructors(where: Located) -> list[ast.Call]:
    """The calls on an optimizer's line that give a learning rate (``Adam(ps, lr=...)``)."""
    return [n for n in ast.walk(where.tree) if isinstance(n, ast.Call) and _rate(n) is not None]


def _times(source: str, node: ast.expr, factor: float) -> str:
    """``node``'s value scaled by ``factor``, as written in its place: a number computed
    (``0.5`` -> ``0.05``), an expression multiplied (``args.lr`` -> ``args.lr * 0.1``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return f"{node.value * factor:.3g}"
    return f"{_operand(source, node)} * {factor:g}"


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


def edit_for(
    findings: list[Finding],
    meta: RunMeta | None = None,
    sources: Sequence[Path] = (),
    why: list[str] | None = None,
) -> Edit | None:
    """The edit for the most serious finding that has one written, else None (``meta``: the
    run log's, where the lines the writers edit were recorded; ``sources``: the user's files,
    where a line the run did not locate is looked for; ``why``: where the reasons a writer
    gave for writing no edit are added)."""
    said = why if why is not None else []
    seen = Seen(meta if meta is not None else RunMeta(), tuple(sources), said)
    for f in findings:
        writer = WRITERS.get(f.kind)
        edit = writer(f, seen) if writer is not None else None
        edit = edit if edit is not None else init_scaled(f, seen)
        edit = edit if edit is not None else _lr_scaled(f, seen)
        if edit is not None:
            return edit
    return None
