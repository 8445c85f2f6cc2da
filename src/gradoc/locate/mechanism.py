"""Why a NaN/Inf was born where it was: the numerical mechanism, and the stable idiom.

``locate`` finds the op that made the first non-finite value from finite inputs. This module
says why its value was bad there, from the op, the ops that made its operands (a few nodes
deep) and their values on the failing step, in the run's numbers: every ``exp`` of a sum
underflowed to 0 before its ``log`` (a log-sum-exp written by hand), a ``sigmoid`` rounded
to exactly 1.0 before ``log(1 - p)``, a norm of 0 under a division, ``E[x²] - E[x]²``
rounded below 0 under a ``sqrt``. Each :class:`~gradoc.detect.finding.Mechanism` names the
idiom that removes the cause (``torch.logsumexp``, ``F.logsigmoid``, ``F.normalize``,
``torch.var``), which ``gradoc fix`` writes in place of the located expression.

The neighbourhood of the birth is read in one of two ways, both only at the failing step:

- in a traced step (a replay, an armed trace, ``check_numerics``) the tracer keeps weak
  references to the operands and outputs of the last ops it saw (:class:`Recent`), so the
  producer of an operand and the producer's own operands are known by identity;
- from a loss's autograd graph (no replay) each node's saved tensors give its operands and
  often its result (``ExpBackward0`` saves its result, ``LogBackward0`` its argument).

Nothing here runs on a healthy step.
"""

from __future__ import annotations

import contextlib
import math
import re
import warnings
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ..detect.finding import Mechanism, Reading

DEPTH = 4
"""Ops read below the birth, at most (through ops that only reshape)."""

RECENT = 512
"""Ops a tracer remembers (weakly) for the producers of a birth's operands."""

HELD = 32
"""Outputs of the last ops a tracer keeps alive: an intermediate nothing else holds (the
``exp`` of ``log(sum(exp(x)))`` under ``no_grad``) is still there to read at the birth."""

_SAME = {
    "true_divide": "div",
    "linalg_vector_norm": "norm",
    "frobenius_norm": "norm",
    "mm": "matmul",
    "addmm": "matmul",
    "bmm": "matmul",
    "baddbmm": "matmul",
    "mv": "matmul",
    "dot": "matmul",
    "linear": "matmul",
    "addmv": "matmul",
    "square": "pow",
    "safe_softmax": "softmax",
    "special_expit": "sigmoid",
}
_PASS = {
    "view", "reshape", "unsafe_view", "expand", "squeeze", "unsqueeze", "clone", "to_copy",
    "contiguous", "alias", "detach", "select", "slice", "permute", "transpose", "t",
    "flatten", "lift_fresh", "lift_fresh_copy", "copy", "index", "narrow", "squeeze_copy",
    "unsqueeze_copy", "view_copy", "expand_copy", "split", "chunk", "unbind",
}  # fmt: skip
"""Ops that move values without computing: a producer is looked for through them."""

LOGS = {"log", "log2", "log10"}
SQUASH = {"sigmoid", "tanh", "softmax"}
MEANS = {"sum", "mean"}


def plain(name: str) -> str:
    """``aten.log.default`` / ``LogBackward0`` / ``log`` -> ``log``; ``aten._softmax`` ->
    ``softmax``; ``LinalgVectorNormBackward0`` -> ``norm``."""
    if name.startswith("aten."):
        name = name.split(".")[1]
    elif re.search(r"Backward\d*$", name):
        name = node_op(name)
    name = name.strip("_")
    return _SAME.get(name, name)


def node_op(name: str) -> str:
    """An autograd node's op, as its name says: ``LinalgVectorNormBackward0`` ->
    ``linalg_vector_norm``."""
    base = re.sub(r"Backward\d*$", "", name.split("::")[-1])
    return re.sub(r"(?<!^)(?=[A-Z])", "_", base).lower()


@dataclass(slots=True)
class Op:
    """An op near the birth: its output and tensor operands where known, the producers of
    those operands, and its number operands (an exponent, a Python divisor)."""

    name: str
    out: Tensor | None = None
    inputs: list[Tensor | None] = field(default_factory=list)
    numbers: list[float] = field(default_factory=list)
    below: list[Op | None] = field(default_factory=list)

    def input(self, i: int = 0) -> Tensor | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def made(self, i: int = 0) -> Op | None:
        """The op that made operand ``i``, through ops that only move values."""
        op = self.below[i] if i < len(self.below) else None
        while op is not None and op.name in _PASS:
            op = op.below[0] if op.below else None
        return op

    def value(self) -> Tensor | None:
        """The op's output: kept, or worked out again from its operands."""
        if self.out is None and self.inputs and all(t is not None for t in self.inputs):
            fn = getattr(torch, self.name, None) if self.name in _RECOMPUTABLE else None
            if fn is not None:
                with contextlib.suppress(RuntimeError, TypeError):
                    self.out = fn(*self.inputs)
        return self.out


_RECOMPUTABLE = {"exp", "log", "sigmoid", "tanh", "sqrt", "acos", "asin", "atanh", "div", "mul"}


# -- reading the neighbourhood ---------------------------------------------------------------
class Recent:
    """The last :data:`RECENT` ops a tracer saw: weak references to their tensor operands and
    outputs, by output identity, and the last :data:`HELD` outputs kept alive (a traced
    step only: nothing is kept once the tracer is gone)."""

    def __init__(self) -> None:
        self._by_out: dict[int, tuple[str, list[Any], weakref.ref[Tensor]]] = {}
        self._order: deque[int] = deque()
        self._held: deque[Tensor] = deque(maxlen=HELD)

    def add(self, func: Any, args: Any, outs: list[Tensor]) -> None:
        name = str(func)  # made plain only when read (:meth:`op`)
        refs = [_ref(a) for a in args]
        for t in outs:
            key = id(t)
            if key not in self._by_out:
                self._order.append(key)
            self._by_out[key] = (name, refs, weakref.ref(t))
            self._held.append(t)
        while len(self._order) > RECENT:
            self._by_out.pop(self._order.popleft(), None)

    def producer(self, t: Tensor, depth: int) -> Op | None:
        """The op that made ``t`` (the tracer's record, else its autograd node)."""
        held = self._by_out.get(id(t))
        if held is not None and held[2]() is t:
            name, refs, _ = held
            args = [r() if isinstance(r, weakref.ref) else r for r in refs]
            return self.op(name, args, t, depth)
        return from_node(t.grad_fn, t, depth) if t.grad_fn is not None else None

    def op(self, name: str, args: list[Any], out: Tensor | None, depth: int = DEPTH) -> Op:
        """The op ``name`` that made ``out`` from ``args``, with the makers of its operands
        read ``depth`` ops deep."""
        op = Op(plain(name), None if out is None else out.detach())
        for a in args:
            if isinstance(a, Tensor) and a.dtype != torch.bool:  # lengths too: ints
                op.inputs.append(a.detach())
                op.below.append(self.producer(a, depth - 1) if depth > 0 else None)
            elif isinstance(a, (int, float)) and not isinstance(a, bool):
                op.numbers.append(float(a))
        return op


def _ref(a: Any) -> Any:
    if isinstance(a, Tensor):
        try:
            return weakref.ref(a)
        except TypeError:
            return None
    return a if isinstance(a, (int, float)) else None


def saved(node: Any) -> dict[str, Any]:
    """What an autograd node saved for its backward, by name (``self``, ``result``,
    ``exponent``), less what a backward already run freed."""
    out: dict[str, Any] = {}
    for attr in dir(node):
        if attr.startswith("_saved_"):
            try:
                out[attr.removeprefix("_saved_")] = getattr(node, attr)
            except RuntimeError:  # freed by a backward already run
                continue
    return out


_SLOTS = (("self", "input", "mat1", "input1"), ("other", "mat2", "vec", "tensor", "input2"))


def from_node(node: Any, out: Tensor | None = None, depth: int = DEPTH) -> Op | None:
    """The op an autograd node recorded: its saved result and operands, and the nodes that
    made its inputs (``out``: the output when a consumer saved it)."""
    if node is None:
        return None
    held = saved(node)
    result = _tensor(held.get("result"))
    op = Op(plain(node.name()), out=result if result is not None else out)
    children = [fn for fn, _ in node.next_functions]
    for i, child in enumerate(children):
        names = _SLOTS[i] if i < len(_SLOTS) else ()
        value = next((t for t in map(_tensor, map(held.get, names)) if t is not None), None)
        op.inputs.append(value)
        op.below.append(
            from_node(child, value, depth - 1) if depth > 0 and child is not None else None
        )
    for key in ("exponent", "other"):
        number = held.get(key)
        if isinstance(number, (int, float)) and not isinstance(number, bool):
            op.numbers.append(float(number))
    return op


def _tensor(v: Any) -> Tensor | None:
    floating = isinstance(v, Tensor) and (v.is_floating_point() or v.is_complex())
    return v.detach() if floating else None


# -- numbers -----------------------------------------------------------------------------------
def n(x: float) -> str:
    """A number as a person writes it in a sentence: ``-10,000``, ``0.0``, ``1.7e+38``."""
    if isinstance(x, float) and (x == 0 or math.isinf(x) or math.isnan(x)):
        return repr(x)
    if abs(x) >= 1e6 or abs(x) < 1e-3:
        return f"{x:.3g}"
    return f"{x:,.5g}"


def _dtype(t: Tensor | None) -> str:
    return str(t.dtype).removeprefix("torch.") if t is not None else "float32"


def _info(t: Tensor | None) -> torch.finfo:
    return torch.finfo(t.dtype if t is not None and t.is_floating_point() else torch.float32)


def exp_floor(t: Tensor | None) -> float:
    """Below this, ``exp`` is 0.0 in ``t``'s dtype (the log of its smallest subnormal)."""
    info = _info(t)
    return math.log(info.smallest_normal * info.eps)


def exp_ceiling(t: Tensor | None) -> float:
    """Above this, ``exp`` is inf in ``t``'s dtype (the log of its largest value)."""
    return math.log(_info(t).max)


def sigmoid_one(t: Tensor | None) -> float:
    """Above this, ``sigmoid`` rounds to exactly 1.0 in ``t``'s dtype."""
    return math.log(2 / _info(t).eps)


@dataclass(slots=True)
class Failing:
    """The birth's failing row: the first index along dim 0 where its output is non-finite,
    and its size there; values of a tensor of the same length are read on that row."""

    row: int | None
    size: int

    def of(self, t: Tensor) -> Tensor:
        t = t.detach()
        return (t[self.row] if self._row_of(t) else t).float()

    def on(self, t: Tensor) -> str:
        """The words ``on the failing row (i)`` where ``t`` is read on it, else nothing."""
        return f" on the failing row ({self.row})" if self._row_of(t) else ""

    def _row_of(self, t: Tensor) -> bool:
        """``t`` is rows of values, as many as the output's: read on the failing one."""
        return self.row is not None and t.dim() >= 2 and t.shape[0] == self.size


def _failing(out: Tensor | None) -> Failing:
    if out is None or out.dim() == 0 or out.shape[0] <= 1:
        return Failing(None, 0)
    bad = (~torch.isfinite(out.detach())).reshape(out.shape[0], -1).any(1).nonzero().flatten()
    return Failing(int(bad[0]) if len(bad) else None, out.shape[0])


# -- the mechanisms ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Kind:
    """One mechanism of the catalogue: what it is, the evidence that shows it, its idiom."""

    kind: str
    what: str
    evidence: str
    idiom: str


CATALOGUE: dict[str, Kind] = {
    "exp_sum_underflow": Kind(
        "underflow",
        "a log-sum-exp written by hand, `log(sum(exp(x)))`: every `exp` of a row underflowed "
        "to 0.0 (its inputs below about -103 in float32), so the sum was 0 and `log(0)` -inf",
        "the inputs of `exp` on the failing row, its outputs (all 0.0), the sum (0.0)",
        "`torch.logsumexp(x, dim)`: it subtracts the row's max before `exp`",
    ),
    "log_of_softmax": Kind(
        "underflow",
        "`log(softmax(x))`: a probability rounded to exactly 0.0 (its logit more than about "
        "103 below the row's largest, in float32), and `log(0)` is -inf",
        "the probabilities of exactly 0.0 on the failing row, the logits' spread",
        "`torch.log_softmax(x, dim)` (or the loss on logits: `F.cross_entropy`)",
    ),
    "product_underflow": Kind(
        "underflow",
        "a product of probabilities underflowed to 0.0 before a `log`",
        "the factors, the product (0.0)",
        "a sum of logs: `torch.log(p).sum(dim)` (with each log itself stable: `log_softmax`, "
        "`logsigmoid`)",
    ),
    "sigmoid_rounded": Kind(
        "saturation",
        "`sigmoid(z)` rounded to exactly 1.0 (z above about 16.6 in float32) before "
        "`log(1 - p)`, or to 0.0 (z below about -103) before `log(p)`",
        "the sigmoid's outputs of exactly 1.0 (or 0.0), the logits that made them",
        "`F.logsigmoid(-z)` for `log(1 - sigmoid(z))` and `F.logsigmoid(z)` for "
        "`log(sigmoid(z))`, or the whole loss as `F.binary_cross_entropy_with_logits(z, t)`",
    ),
    "tanh_rounded": Kind(
        "saturation",
        "`tanh(x)` rounded to exactly ±1.0 before `log(1 - t)`, `log(1 - t**2)` or `atanh`",
        "the outputs of exactly ±1.0, the inputs that made them",
        "the pre-tanh value: `log(1 - tanh(x)**2) = 2 * (log(2) - x - softplus(-2x))`; "
        "never `atanh(tanh(x))`",
    ),
    "saturated_division": Kind(
        "saturation",
        "a division by `1 - p` where `p` (a sigmoid, tanh or softmax) rounded to exactly 1.0",
        "the outputs of exactly 1.0 under the division",
        "the ratio in the logit: `p / (1 - p) = exp(z)`, `1 / (1 - p) = 1 + exp(z)`",
    ),
    "overflow": Kind(
        "overflow",
        "`exp`, `pow`, `cosh`, a square or a matrix product past the largest value of its "
        "dtype (float16: 65,504; float32 and bfloat16: 3.4e38)",
        "the dtype's limit, the input that crossed it",
        "float16/bfloat16: compute it in float32 (autocast keeps `exp`, `pow`, `softmax`, "
        "sums in float32), scale an operand before a matrix product; float32 `exp`: clamp "
        "its input (`x.clamp(max=80)`) or use the function that does it stably (`softmax`, "
        "`logsumexp`, `softplus`)",
    ),
    "zero_norm": Kind(
        "zero",
        "a norm of exactly 0 (an all-zero vector) under a division",
        "the rows whose norm was 0",
        "`F.normalize(x, dim=..., eps=1e-12)` (or `x / norm.clamp_min(1e-12)`: the numerator "
        "is 0 there too, so the result is the right 0)",
    ),
    "zero_std": Kind(
        "zero",
        "a standard deviation of exactly 0 (a constant row) under a division",
        "the rows whose standard deviation was 0",
        "`(x - mean) / torch.sqrt(var + eps)`, as LayerNorm does",
    ),
    "one_sample": Kind(
        "zero",
        "a standard deviation or variance of one sample with Bessel's correction: (x - "
        "mean)² / (n - 1) = 0/0",
        "the number of values reduced (1)",
        "`x.std(unbiased=False)` (`correction=0`), or a guard for a batch of one",
    ),
    "zero_length": Kind(
        "zero",
        "a length minus one (or a count) of 0 under a division: a sequence of length 1, an "
        "all-padding row",
        "the divisor's zeros, the lengths of the samples where it was 0",
        "a divisor that cannot be 0: `max(n - 1, 1)` / `count.clamp_min(1)`",
    ),
    "zero_divisor": Kind(
        "zero",
        "a division by exactly 0",
        "the divisor's zeros, 0/0 positions",
        "no idiom: find why the divisor is 0; `d.clamp_min(eps)` hides it and changes the "
        "result where it was 0",
    ),
    "sqrt_at_zero": Kind(
        "zero",
        "the backward of `sqrt` (or of `x ** p`, p < 1) at exactly 0: its derivative "
        "1 / (2 sqrt(0)) is inf, and 0 * inf = NaN beneath it (a distance of a point to "
        "itself, a norm of a zero vector written by hand)",
        "the square root's arguments of exactly 0",
        "the epsilon inside the root: `torch.sqrt(x + 1e-12)`, or `torch.linalg.vector_norm`, "
        "whose backward is defined at 0",
    ),
    "root_of_zero": Kind(
        "zero",
        "`rsqrt` of exactly 0 (a mean square of an all-zero row: an RMSNorm without eps)",
        "the arguments of exactly 0",
        "the epsilon inside the root: `torch.rsqrt(ms + 1e-6)`",
    ),
    "variance_cancellation": Kind(
        "domain",
        "a variance computed as E[x²] - E[x]² rounded below 0 (the two terms agree to the "
        "last digits) under a `sqrt` or `log`",
        "the negative variances, the mean and spread of the values",
        "`torch.var(x, dim, correction=0)`: it subtracts the mean first",
    ),
    "cosine_past_one": Kind(
        "domain",
        "`acos`/`asin` of a cosine rounded past ±1 (1.0000001), or its backward at exactly ±1",
        "the largest |argument|",
        "`torch.acos(c.clamp(-1 + 1e-7, 1 - 1e-7))`",
    ),
    "fractional_power": Kind(
        "domain",
        "a fractional power of a negative base",
        "the negative bases, the exponent",
        "`x.clamp_min(0) ** p` where the base must be positive, `x.sign() * x.abs() ** p` "
        "where its sign carries",
    ),
    "negative_argument": Kind(
        "domain",
        "`log` or `sqrt` of a negative argument",
        "the negative arguments, their minimum",
        "no idiom: find why the argument is negative; `x.clamp_min(eps)` hides it",
    ),
    "zero_argument": Kind(
        "zero",
        "`log` of exactly 0",
        "the arguments of exactly 0",
        "no idiom: find why the argument is 0 (a probability that underflowed, a count); "
        "`x.clamp_min(eps)` changes the result by orders of magnitude where it was 0",
    ),
    "masked_row": Kind(
        "masking",
        "every score of a row masked to -inf before `softmax`: exp(-inf) is 0 everywhere, the "
        "row's sum 0, and 0/0 is NaN (a causal mask inverted or masking its diagonal too, a "
        "row that is all padding)",
        "the rows whose scores were all -inf, of how many",
        "a mask that leaves each row at least one position: a causal mask hides the future "
        "only (`scores.masked_fill(torch.tril(ones) == 0, -inf)`, or `torch.triu(ones, "
        "diagonal=1)` as the positions hidden); a row of padding only gets a finite fill",
    ),
    "inherited": Kind(
        "inherited",
        "an input, a weight or a buffer was already NaN/Inf when the op took it",
        "which tensor, and when it became so",
        "find where it was made (the data, the update before); skip non-finite batches at "
        "the data loader",
    ),
}
"""Every mechanism gradoc names (the findings reference lists them)."""

NO_IDIOM = {"zero_divisor", "negative_argument", "zero_argument"}
"""Mechanisms whose only guard is a clamp of the operand: said as such."""


def _said(name: str, said: str, idiom: str | None = None, *ev: Reading) -> Mechanism:
    kind = CATALOGUE[name]
    return Mechanism(kind.kind, name, said, idiom or kind.idiom, list(ev))


def explain(birth: Op, node_phase: bool = False) -> Mechanism | None:
    """The mechanism of ``birth`` (its output non-finite, its inputs finite), or None."""
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the program's own filters may make warnings errors
        failing = _failing(birth.value())
        for rule in (_backward,) if node_phase else _RULES:
            try:
                found = rule(birth, failing)
            except (RuntimeError, TypeError, ValueError, IndexError):
                found = None
            if found is not None:
                return found
    return None


def _count(mask: Tensor) -> int:
    return int(mask.sum())


def _log_zero(b: Op, f: Failing) -> Mechanism | None:
    if b.name not in LOGS:
        return None
    a = b.input(0)
    if a is None or not _count(a == 0):
        return None
    p = b.made(0)
    name = p.name if p is not None else ""
    if p is not None and name in MEANS and (e := p.made(0)) is not None and e.name == "exp":
        return _exp_sum(b, p, e, f)
    if p is not None and name in ("softmax", "div") and _softmax_like(p):
        return _log_softmax(a, p, f)
    if p is not None and name in ("prod", "cumprod", "mul"):
        found = _product(a, p, f)
        if found is not None:
            return found
    if p is not None and name == "rsub":
        found = _rounded_one(p, f, "log")
        if found is not None:
            return found
    if p is not None and name == "sigmoid":
        z = p.input(0)
        zero = _count(f.of(a) == 0)
        ev = [Reading("sigmoid outputs of exactly 0.0" + f.on(a), zero)]
        low = ""
        if z is not None:
            ev.append(Reading("its smallest input", float(f.of(z).min())))
            low = f" (its input reached {n(float(f.of(z).min()))})"
        return _said(
            "sigmoid_rounded",
            f"sigmoid rounded to exactly 0.0 in {_dtype(a)}{low}: its input was below "
            f"{n(exp_floor(a))}; log(0) = -inf",
            "`F.logsigmoid(z)` for `log(sigmoid(z))`, or the loss as "
            "`F.binary_cross_entropy_with_logits(z, t)`",
            *ev,
        )
    zeros = _count(a == 0)
    made = f" (made by {name})" if name else ""
    return _said(
        "zero_argument",
        f"{zeros} of the {a.numel()} arguments of {b.name}{made} were exactly 0.0; "
        f"{b.name}(0) = -inf",
        None,
        Reading(f"{b.name} arguments of exactly 0.0", zeros, {"of": a.numel()}),
        *_smallest(a, "argument"),
    )


def _values(k: int) -> str:
    return "1 value" if k == 1 else f"{k:,} values"


def _softmax_like(p: Op) -> bool:
    if p.name == "softmax":
        return True
    num, den = p.made(0), p.made(1)
    return num is not None and num.name == "exp" and den is not None and den.name in MEANS


def _exp_sum(b: Op, s: Op, e: Op, f: Failing) -> Mechanism:
    x = e.input(0)
    ex = e.value()
    ref = x if x is not None else ex
    floor = exp_floor(ref)
    ev: list[Reading] = []
    said = "every exp in the sum underflowed"
    if x is not None:
        row = f.of(x)
        top = float(row.max())
        on = f.on(x)
        ev.append(Reading("largest input of exp" + on, top, {"of": row.numel()}))
        ev.append(Reading("smallest input of exp" + on, float(row.min())))
        said += (
            f": the {row.numel():,} inputs of exp{on} were <= {n(top)} ({_dtype(x)}'s exp "
            f"is 0.0 below {n(floor)})"
        )
    elif ex is not None:
        zeros = _count(f.of(ex) == 0)
        on = f.on(ex)
        ev.append(Reading("exp outputs of exactly 0.0" + on, zeros, {"of": f.of(ex).numel()}))
        said += (
            f": {zeros:,} of the {f.of(ex).numel():,} outputs of exp{on} were 0.0 (its inputs "
            f"were below {n(floor)}, where {_dtype(ex)}'s exp underflows)"
        )
    said += f"; their {s.name} was 0.0; {b.name}(0) = -inf"
    idiom = CATALOGUE["exp_sum_underflow"].idiom
    if s.name == "mean":
        idiom = "`torch.logsumexp(x, dim) - math.log(x.shape[dim])`: it subtracts the row's max"
    return _said("exp_sum_underflow", said, idiom, *ev)


def _log_softmax(a: Tensor, p: Op, f: Failing) -> Mechanism:
    zeros = _count(f.of(a) == 0)
    on = f.on(a)
    ev = [Reading("probabilities of exactly 0.0" + on, zeros, {"of": f.of(a).numel()})]
    said = f"{zeros:,} softmax probabilities{on} were exactly 0.0 in {_dtype(a)}"
    logits = p.input(0) if p.name == "softmax" else None
    if logits is not None:
        row = f.of(logits)
        spread = float(row.max() - row.min())
        ev.append(Reading("largest minus smallest logit" + f.on(logits), spread))
        said += f" (the logits spread over {n(spread)}: exp of {n(-spread)} is 0.0)"
    else:
        said += f" (a logit more than {n(-exp_floor(a))} below the row's largest)"
    hand = "" if p.name == "softmax" else " (the softmax written by hand, exp / sum of exp)"
    return _said("log_of_softmax", said + hand + "; log(0) = -inf", None, *ev)


def _product(a: Tensor, p: Op, f: Failing) -> Mechanism | None:
    factors = [t for t in p.inputs if t is not None]
    if not factors or not all(bool(((t >= 0) & (t <= 1)).all()) for t in factors):
        return None
    if p.name == "mul" and any(_count(f.of(t) == 0) for t in factors):
        return None  # a factor of 0, not an underflow
    smallest = min(float(t.min()) for t in factors)
    count = factors[0].numel() if p.name != "mul" else len(factors)
    return _said(
        "product_underflow",
        f"a product of {count} probabilities (the smallest {n(smallest)}) underflowed to 0.0 "
        f"in {_dtype(a)}; log(0) = -inf",
        None,
        Reading("factors of the product", count),
        Reading("smallest factor", smallest),
    )


def _rounded_one(r: Op, f: Failing, use: str) -> Mechanism | None:
    """``1 - p`` of 0 where ``p`` is a squashing output rounded to exactly 1."""
    q = r.made(0)
    square = q is not None and q.name == "pow" and q.numbers[:1] == [2.0]
    if square:
        q = q.made(0) if q is not None else None
    if q is None or q.name not in SQUASH:
        return None
    p = q.value()
    if p is None:
        return None
    ones = _count(f.of(p).abs() == 1)
    if not ones:
        return None
    x = q.input(0)
    ev = [Reading(f"{q.name} outputs of exactly 1.0" + f.on(p), ones, {"of": f.of(p).numel()})]
    inputs = ""
    if x is not None and q.name != "softmax":
        top = float(f.of(x).abs().max())
        ev.append(Reading(f"largest |input| of {q.name}" + f.on(x), top))
        inputs = f" (its input reached {n(top)}"
        if q.name == "sigmoid":
            inputs += f"; above {n(sigmoid_one(p))} it is 1.0 in {_dtype(p)}"
        inputs += ")"
    what = "1 - p**2" if square else "1 - p"
    tail = f"; {what} = 0 and log(0) = -inf" if use == "log" else f"; {what} = 0 under the division"
    said = (
        f"{q.name} rounded to exactly 1.0 in {_dtype(p)} at {_values(ones)}{f.on(p)}{inputs}{tail}"
    )
    if use == "div":
        return _said("saturated_division", said, None, *ev)
    if q.name == "tanh":
        return _said("tanh_rounded", said, None, *ev)
    if q.name == "softmax":
        return _said(
            "sigmoid_rounded", said, "`torch.log_softmax` of the other classes' logits", *ev
        )
    return _said("sigmoid_rounded", said, None, *ev)


def _div_zero(b: Op, f: Failing) -> Mechanism | None:
    if b.name != "div":
        return None
    d = b.input(1)
    if d is None:
        return None
    zeros = _count(d == 0)
    if not zeros:
        return None
    ev = [Reading("divisor values of exactly 0", zeros, {"of": d.numel()})]
    num = b.input(0)
    if num is not None:
        with contextlib.suppress(RuntimeError):
            ev.append(Reading("0/0 positions", _count((d == 0) & (num == 0))))
    p = b.made(1)
    name = p.name if p is not None else ""
    rows = f" ({zeros} of {d.numel()})"
    if p is not None and (name == "norm" or _hand_norm(p)):
        return _said(
            "zero_norm",
            f"the norm under the division was exactly 0{rows}: all-zero vectors; 0/0 = NaN",
            None,
            *ev,
        )
    if p is not None and (name in ("std", "var") or (name == "sqrt" and _made(p, ("var",)))):
        return _said(
            "zero_std",
            f"the standard deviation under the division was exactly 0{rows}: constant rows",
            None,
            *ev,
        )
    if p is not None and name == "add" and _made(p, ("std", "var")):
        return None  # std + eps is not 0
    if p is not None and name == "rsub":
        found = _rounded_one(p, f, "div")
        if found is not None:
            return found
    if p is not None and name == "sub" and p.numbers[:1] == [1.0]:
        return _said(
            "zero_length",
            f"the divisor, a length minus one, was 0{rows}: samples of length 1",
            "a divisor that cannot be 0: `(n - 1).clamp_min(1)`",
            *ev,
        )
    if p is not None and name == "sum":
        return _said(
            "zero_length",
            f"the divisor, a sum (a count, a mask's total), was 0{rows}: rows with nothing "
            "to count (all padding)",
            "a count that cannot be 0: `mask.sum(dim).clamp_min(1)`",
            *ev,
        )
    if p is None and _counts(d):
        return _said(
            "zero_length",
            f"the divisor, whole numbers from {int(d.min())} to {int(d.max())} (a count or a "
            f"length), was 0{rows}: rows with nothing to count",
            "a count that cannot be 0: `count.clamp_min(1)`",
            *ev,
        )
    made = f" (made by {name})" if name else ""
    ev += _smallest(d, "divisor")
    return _said("zero_divisor", f"the divisor{made} was exactly 0{rows}", None, *ev)


SMALLEST = "smallest non-zero |{}|"
"""The reading of the smallest non-zero size an operand took, beside its zeros: how far a
clamp of it (``gradoc fix``'s floor) would be from the values the program saw."""


def _smallest(t: Tensor, what: str) -> list[Reading]:
    nonzero = t[t != 0].abs()
    return [Reading(SMALLEST.format(what), float(nonzero.min()))] if nonzero.numel() else []


def _counts(d: Tensor) -> bool:
    """``d`` holds whole numbers (at least 4 of them, not all 0 or 1): a count or a length
    whose making the graph does not show (a mask summed without gradient)."""
    if d.numel() < 4:
        return False
    v = d.detach().double()
    return bool((v >= 0).all() and (v == v.round()).all() and v.max() > 1)


def _made(p: Op, names: tuple[str, ...]) -> bool:
    below = p.made(0)
    return below is not None and below.name in names


def _hand_norm(p: Op) -> bool:
    """``sqrt(sum(x**2))`` / ``(x * x).sum() ** 0.5``."""
    if not (p.name == "sqrt" or (p.name == "pow" and p.numbers[:1] == [0.5])):
        return False
    s = p.made(0)
    return s is not None and s.name in MEANS


PYTHON_DIVISOR = "the Python divisor"
"""The reading of a divisor that was a Python number (``gradoc fix`` floors it with ``max``)."""


def _number_div(b: Op, f: Failing) -> Mechanism | None:
    if b.name != "div" or b.input(1) is not None or b.numbers[-1:] != [0.0]:
        return None
    return _said(
        "zero_length",
        "the divisor, a Python number, was 0 (a length minus one of a sequence of length 1, "
        "an empty count)",
        "a divisor that cannot be 0: `max(n - 1, 1)`",
        Reading(PYTHON_DIVISOR, 0),
    )


def _root_zero(b: Op, f: Failing) -> Mechanism | None:
    a = b.input(0)
    if b.name != "rsqrt" or a is None or not _count(a == 0):
        return None
    zeros = _count(a == 0)
    return _said(
        "root_of_zero",
        f"{_values(zeros)} under rsqrt were exactly 0 (all-zero rows); rsqrt(0) = inf",
        None,
        Reading("rsqrt arguments of exactly 0", zeros, {"of": a.numel()}),
    )


def _one_sample(b: Op, f: Failing) -> Mechanism | None:
    if b.name not in ("std", "var", "std_mean", "var_mean"):
        return None
    x, out = b.input(0), b.value()
    if x is None or out is None or not out.numel():
        return None
    reduced = x.numel() // max(out.numel(), 1)
    if reduced > 1:
        return None
    return _said(
        "one_sample",
        f"{b.name} of {reduced} value{'s' if reduced != 1 else ''} with Bessel's correction "
        "(n - 1 = 0): 0/0 = NaN",
        None,
        Reading(f"values reduced by {b.name}", reduced),
    )


def _negative(b: Op, f: Failing) -> Mechanism | None:
    if b.name not in (*LOGS, "sqrt", "rsqrt"):
        return None
    a = b.input(0)
    if a is None or not _count(a < 0):
        return None
    ev = [
        Reading(f"negative arguments of {b.name}", _count(a < 0), {"of": a.numel()}),
        Reading(f"smallest argument of {b.name}", float(a.min())),
    ]
    p = b.made(0)
    if p is not None and p.name == "add" and (q := p.made(0)) is not None and q.name == "sub":
        p = q  # var + eps: the eps does not reach a negative variance
    if p is not None and p.name == "sub" and _variance(p):
        values = p.made(0)
        x = _squared(values.made(0)) if values is not None else None
        spread = ""
        if x is not None:
            spread = f" (the values: mean {n(float(x.mean()))}, std {n(float(x.std()))})"
            ev.append(Reading("mean of the values", float(x.mean())))
        return _said(
            "variance_cancellation",
            f"a variance computed as E[x²] - E[x]² rounded to {n(float(a.min()))}{spread}: "
            f"the two terms cancel to their last digits in {_dtype(a)}; {b.name} of a "
            "negative is NaN",
            None,
            *ev,
        )
    made = f" (made by {p.name})" if p is not None else ""
    return _said(
        "negative_argument",
        f"{_count(a < 0)} arguments of {b.name}{made} were negative (the smallest "
        f"{n(float(a.min()))}); {b.name} of a negative is NaN",
        None,
        *ev,
    )


def _variance(sub: Op) -> bool:
    """``mean(x**2) - mean(x)**2`` (either order of mean and square)."""
    left, right = sub.made(0), sub.made(1)
    if left is None or right is None:
        return False
    sq_of_mean = right.name == "pow" and (m := right.made(0)) is not None and m.name in MEANS
    sq_of_mean |= right.name == "mul" and (m := right.made(0)) is not None and m.name in MEANS
    mean_of_sq = left.name in MEANS and _squared(left.made(0)) is not None
    return sq_of_mean and mean_of_sq


def _squared(op: Op | None) -> Tensor | None:
    """The base of ``x**2`` / ``x * x`` (None when ``op`` is neither)."""
    if op is None:
        return None
    if op.name == "pow" and op.numbers[:1] == [2.0]:
        return op.input(0)
    a, b = op.input(0), op.input(1)
    if op.name == "mul" and a is not None and b is not None and _same(a, b):
        return a
    return None


def _same(a: Tensor, b: Tensor) -> bool:
    """The same values (``x * x``): one storage, one view of it."""
    return a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride()


def _cosine(b: Op, f: Failing) -> Mechanism | None:
    if b.name not in ("acos", "asin", "atanh"):
        return None
    a = b.input(0)
    if a is None:
        return None
    past = _count(a.abs() > 1) if b.name != "atanh" else _count(a.abs() >= 1)
    if not past:
        return None
    top = float(a.abs().max())
    if b.name == "atanh":
        p = b.made(0)
        if p is not None and p.name == "tanh":
            ev = [Reading("atanh arguments of ±1.0", past)]
            reached = ""
            if (u := p.input(0)) is not None:
                ev.append(Reading("largest |input| of tanh", float(u.abs().max())))
                reached = f" (its input reached {n(float(u.abs().max()))})"
            return _said(
                "tanh_rounded",
                f"tanh rounded to exactly ±1.0 in {_dtype(a)} at {_values(past)}{reached}; "
                "atanh(±1) = ±inf: the pre-tanh value it would recover is the tanh's own input",
                None,
                *ev,
            )
        return _said(
            "cosine_past_one",
            f"{past} arguments of atanh were at or past ±1 (the largest |x| {n(top)})",
            "`torch.atanh(x.clamp(-1 + 1e-6, 1 - 1e-6))`",
            Reading("largest |argument|", top),
        )
    return _said(
        "cosine_past_one",
        f"{past} arguments of {b.name} were past ±1 (the largest |x| {top!r}): a cosine "
        f"rounded above 1 in {_dtype(a)}; {b.name} of it is NaN",
        None,
        Reading(f"arguments of {b.name} past ±1", past, {"of": a.numel()}),
        Reading("largest |argument|", top),
    )


def _power(b: Op, f: Failing) -> Mechanism | None:
    if b.name != "pow" or not b.numbers:
        return None
    a, p = b.input(0), b.numbers[0]
    if a is None or float(p).is_integer() or not _count(a < 0):
        return None
    return _said(
        "fractional_power",
        f"{_count(a < 0)} negative bases raised to the fractional power {n(p)} (the "
        f"smallest {n(float(a.min()))}): NaN",
        None,
        Reading("negative bases", _count(a < 0), {"of": a.numel()}),
        Reading("exponent", p),
    )


_OVERFLOWS = {"exp", "exp2", "expm1", "pow", "cosh", "sinh", "mul", "matmul", "sum", "add",
              "softplus", "square", "linear", "conv2d", "convolution", "mean", "norm"}  # fmt: skip


def _masked_row(b: Op, f: Failing) -> Mechanism | None:
    """A softmax whose input has a row of -inf only (the row it normalises over)."""
    x = b.input(0)
    if b.name != "softmax" or x is None or x.dim() == 0:
        return None
    dim = int(b.numbers[0]) if b.numbers else -1
    rows = torch.isneginf(x).all(dim)
    masked = _count(rows)
    if not masked:
        return None
    said = (
        f"{masked:,} of the {rows.numel():,} rows softmax normalised held -inf at every "
        f"position ({x.shape[dim]} of {x.shape[dim]}): their exp summed to 0 and 0/0 is NaN"
    )
    ev = [Reading("rows of -inf only", masked, {"of": rows.numel()})]
    return _said("masked_row", said, None, *ev)


def _overflow(b: Op, f: Failing) -> Mechanism | None:
    if b.name not in _OVERFLOWS:
        return None
    out = b.value()
    if out is None or bool(torch.isnan(out).any()) or not bool(torch.isinf(out).any()):
        return None
    x = next((t for t in b.inputs if t is not None), None)
    info = _info(out)
    dtype = _dtype(out)
    ev = [Reading(f"largest value of {dtype}", float(info.max), {"dtype": dtype})]
    said = f"{b.name} overflowed {dtype}'s largest value, {n(float(info.max))}"
    if x is not None:
        top = float(f.of(x).max()) if b.name.startswith("exp") else float(f.of(x).abs().max())
        ev.append(Reading(f"largest input of {b.name}" + f.on(x), top))
        said += f": its input reached {n(top)}{f.on(x)}"
        if b.name == "exp":
            said += f" (exp is inf above {n(exp_ceiling(out))} in {dtype})"
        if dtype in LOW_PRECISION and b.name in ("matmul", "mul", "pow", "sum"):
            wide = _in_float32(b)
            if wide is not None:
                ev.append(Reading("largest |value| computed in float32", wide))
                said += f"; computed in float32 its largest |value| is {n(wide)}"
    if dtype in LOW_PRECISION:
        ev.append(Reading("dtype", dtype))
        idiom = (
            "compute it in float32: `x.float()` before it (autocast keeps exp, pow, softmax and "
            "sums in float32 on its own lists)"
        )
        if b.name in _PRODUCTS:
            idiom = (
                "compute the product in float32 with autocast off around it (`with "
                "torch.autocast(device_type, enabled=False): a.float() @ b.float()`; autocast "
                "casts `.float()` operands of a matmul back to 16 bits), or scale an operand "
                "before it (`(q * d ** -0.5) @ k.T`)"
            )
    elif b.name == "exp":
        idiom = (
            "the function that computes it stably (`softmax`, `logsumexp`, `F.softplus`), or "
            "its input clamped before exp: `torch.exp(x.clamp(max=80.0))` (changes exp(x) only "
            "where it overflowed)"
        )
    else:
        idiom = "scale the values down before this op (they grew past the dtype's range)"
    return _said("overflow", said, idiom, *ev)


LOW_PRECISION = {"float16", "bfloat16"}
_PRODUCTS = {"matmul", "mm", "bmm", "linear", "conv2d", "convolution", "baddbmm", "addmm"}


def low_precision(m: Mechanism) -> bool:
    """An overflow of a 16-bit dtype's range (its fix: compute in float32), read from the
    dtype its limit reading names."""
    return m.name == "overflow" and any(e.extra.get("dtype") in LOW_PRECISION for e in m.evidence)


def _in_float32(b: Op) -> float | None:
    ins = [t for t in b.inputs if t is not None]
    if len(ins) != len(b.inputs) or not ins:
        return None
    wide = [t.detach().float() for t in ins]
    try:
        if b.name == "matmul" and len(wide) >= 2:
            out = wide[-2] @ wide[-1] if len(wide) > 2 else wide[0] @ wide[1]
        elif b.name == "mul" and len(wide) == 2:
            out = wide[0] * wide[1]
        elif b.name == "pow" and b.numbers:
            out = wide[0] ** b.numbers[0]
        else:
            out = wide[0].sum()
    except RuntimeError:
        return None
    return float(out.abs().max())


def _backward(b: Op, f: Failing) -> Mechanism | None:
    """A birth in the backward, by the node running it: a root's derivative at 0, acos'
    at ±1."""
    if b.name in ("sqrt", "pow", "norm") or (b.name == "pow" and b.numbers[:1] == [0.5]):
        root = b.value() if b.name == "sqrt" else b.input(0)
        if b.name == "norm":
            root = b.out
        if root is None or not _count(root == 0):
            return None
        if b.name == "pow" and not (b.numbers and 0 < b.numbers[0] < 1):
            return None
        zeros = _count(root == 0)
        return _said(
            "sqrt_at_zero",
            f"{_values(zeros)} under {b.name} were exactly 0: its derivative there, "
            f"1 / (2 sqrt(0)), is inf, and 0 * inf = NaN in the backward",
            None,
            Reading(f"{b.name} arguments of exactly 0", zeros, {"of": root.numel()}),
        )
    if b.name in ("acos", "asin"):
        a = b.input(0)
        if a is not None and _count(a.abs() >= 1):
            return _said(
                "cosine_past_one",
                f"{_count(a.abs() >= 1)} arguments of {b.name} were exactly ±1: its "
                "derivative 1 / sqrt(1 - x²) is inf there",
                None,
                Reading(f"{b.name} arguments of ±1", _count(a.abs() >= 1)),
            )
    return None


_RULES: tuple[Callable[[Op, Failing], Mechanism | None], ...] = (
    _log_zero,
    _negative,
    _div_zero,
    _number_div,
    _root_zero,
    _one_sample,
    _cosine,
    _power,
    _overflow,
    _masked_row,
)


def one_sample_entered(name: str, t: Tensor, calls: str) -> Mechanism | None:
    """A tensor computed without gradient, NaN everywhere, of one sample, on a line that
    takes a ``std``/``var`` (advantages normalised under ``no_grad`` in a batch of one)."""
    if not any(c in calls.split(" or ") for c in ("std", "var")):
        return None
    if t.dim() == 0 or t.shape[0] != 1 or not bool(torch.isnan(t).all()):
        return None
    return _said(
        "one_sample",
        f"`{name}` holds one sample and its std/var with Bessel's correction divides by "
        "n - 1 = 0: 0/0 = NaN",
        None,
        Reading(f"samples in {name}", 1),
    )


def inherited(what: str, said: str, *ev: Reading) -> Mechanism:
    """An operand already non-finite when it was taken (an input, a weight, a buffer)."""
    return _said("inherited", f"{what} {said}", None, *ev)
