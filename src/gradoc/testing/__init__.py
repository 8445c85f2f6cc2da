"""gradoc.testing: does a module stay finite on edge-case inputs? One line in a test.

``check_numerics(module_or_fn, example_inputs)`` runs forward and backward on variants of
the example: sequence lengths 1 and 2 (tensors cut along ``seq_dim``, per-sample integer
lengths clamped), all zeros, constant rows (every value of a row equal: a norm without
epsilon divides by a zero std), very large (x1e4) and very small (x1e-8) magnitudes, and
fp16 / bf16 (a copy of the module and the inputs cast). Every non-finite output or gradient
is reported with its origin — the operation, module, file and line where the value was
born — found by gradoc's locate machinery. ``assert_finite`` raises ``AssertionError``
naming the failing variant and the origin; the pytest plugin gives it as a fixture.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from .._util import objects
from .._util.objects import IdMap
from .._util.state import kept
from .._util.tree import floats as _floats
from ..detect.finding import Origin

__all__ = ["NumericsProblem", "assert_finite", "check_numerics"]

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True, slots=True)
class NumericsProblem:
    variant: str
    where: str
    """``output``, ``gradient`` or ``raised``."""
    detail: str
    origin: Origin | None = None

    def message(self) -> str:
        text = f"variant {self.variant!r}: {self.detail}"
        o = self.origin
        if o:
            where = f" in {o.module}" if o.module else ""
            line = f" at {o.file}:{o.line}" if o.file else ""
            code = f" `{o.code}`" if o.code else ""
            text += f"; born in the {o.phase} pass: {o.op}{where}{line}{code}"
        return text


class _Fn(nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def _map(x: Any, f: Callable[[Tensor], Tensor]) -> Any:
    if isinstance(x, Tensor):
        return f(x)
    if isinstance(x, tuple):
        return tuple(_map(v, f) for v in x)
    if isinstance(x, list):
        return [_map(v, f) for v in x]
    if isinstance(x, dict):
        return {k: _map(v, f) for k, v in x.items()}
    return x


def _variants(
    seq_dim: int, lengths: Sequence[int], scales: Sequence[float], dtypes: Sequence[str]
) -> Iterator[tuple[str, Callable[[Tensor], Tensor], str | None]]:
    for n in lengths:

        def cut(t: Tensor, n: int = n) -> Tensor:
            if t.dim() > seq_dim and t.shape[seq_dim] > n:
                return t.narrow(seq_dim, 0, n).clone()
            if t.dim() == 1 and not t.is_floating_point() and t.dtype != torch.bool:
                return t.clamp(max=n)  # per-sample lengths
            return t

        yield f"sequence length {n}", cut, None
    yield "zeros", lambda t: torch.zeros_like(t) if t.is_floating_point() else t, None
    yield (
        "constant rows",
        lambda t: t[..., :1].expand_as(t).clone() if t.is_floating_point() and t.dim() >= 2 else t,
        None,
    )
    for s in scales:

        def scale(t: Tensor, s: float = s) -> Tensor:
            return t * s if t.is_floating_point() else t

        yield f"magnitude x{s:g}", scale, None
    for name in dtypes:
        yield name, (lambda t: t), name


def check_numerics(
    module_or_fn: nn.Module | Callable[..., Any],
    example_inputs: Any,
    *,
    kwargs: dict[str, Any] | None = None,
    seq_dim: int = 1,
    lengths: Sequence[int] = (1, 2),
    scales: Sequence[float] = (1e4, 1e-8),
    dtypes: Sequence[str] = ("float16", "bfloat16"),
    backward: bool = True,
) -> list[NumericsProblem]:
    """Run every variant (see the module docstring); the problems found, with origins."""
    from ..locate import locate_step

    base = module_or_fn if isinstance(module_or_fn, nn.Module) else _Fn(module_or_fn)
    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    problems = []
    for name, change, dtype in _variants(seq_dim, lengths, scales, dtypes):
        module = base
        v_args, v_kwargs = _map(args, change), _map(dict(kwargs or {}), change)
        if dtype is not None:
            dt = DTYPES[dtype]
            module = copy.deepcopy(base).to(dt)

            def cast(t: Tensor, dt: torch.dtype = dt) -> Tensor:
                return t.to(dt) if t.is_floating_point() else t

            v_args, v_kwargs = _map(v_args, cast), _map(v_kwargs, cast)
        v_args = _map(v_args, lambda t: t.detach().requires_grad_(t.is_floating_point()))
        try:
            # the user's module keeps its gradients, buffers and RNG: variants change nothing
            with kept([module], objects.parameters(module)), torch.enable_grad():
                objects.zero_grad(module)
                out = module(*v_args, **v_kwargs)
                outs = _floats(out)
                bad_out = any(not bool(torch.isfinite(t).all()) for t in outs)
                bad_grad = False
                if backward and not bad_out and outs and outs[0].requires_grad:
                    sum(t.float().sum() for t in outs).backward()  # type: ignore[union-attr]
                    grads = [p.grad for p in objects.parameters(module) if p.grad is not None]
                    grads += [t.grad for t in _floats(v_args) if t.grad is not None]
                    bad_grad = any(not bool(torch.isfinite(g).all()) for g in grads)
        except RuntimeError as exc:
            if "not implemented for" in str(exc):
                continue  # this dtype has no kernel here (CPU fp16): not the module's fault
            problems.append(NumericsProblem(name, "raised", f"{type(exc).__name__}: {exc}"))
            continue
        if not (bad_out or bad_grad):
            continue
        names = IdMap((m, n) for n, m in objects.named_modules(module))
        fresh = _map(v_args, lambda t: t.detach().requires_grad_(t.is_floating_point()))
        out_grad = torch.ones_like(outs[0]) if outs else None
        origin = locate_step(0, [module], names, (fresh, v_kwargs), None, out_grad)
        problems.append(
            NumericsProblem(
                name,
                "output" if bad_out else "gradient",
                "non-finite output" if bad_out else "non-finite gradient",
                origin,
            )
        )
    return problems


def assert_finite(
    module_or_fn: nn.Module | Callable[..., Any], example_inputs: Any, **kw: Any
) -> None:
    """``check_numerics``, raising ``AssertionError`` with every problem and its origin."""
    problems = check_numerics(module_or_fn, example_inputs, **kw)
    if problems:
        raise AssertionError(
            "non-finite values on edge-case inputs:\n" + "\n".join(p.message() for p in problems)
        )
