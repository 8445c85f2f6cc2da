"""The module a user wrote, inside the wrappers PyTorch puts around it."""

from __future__ import annotations

import sys
import warnings

import torch
import torch.nn as nn


def compiled(module: nn.Module) -> bool:
    """A ``torch.compile``d module (an ``OptimizedModule`` holding ``_orig_mod``)."""
    dynamo = sys.modules.get("torch._dynamo.eval_frame")  # nothing is compiled unless loaded
    return dynamo is not None and isinstance(module, dynamo.OptimizedModule)


_FUNCTORCH = getattr(getattr(torch._C, "_functorch", None), "peek_interpreter_stack", None)


def compiling() -> bool:
    """True while torch.compile traces."""
    return torch.compiler.is_compiling()


def traced() -> bool:
    """True while torch.compile traces, or inside a ``torch.func`` transform (``vmap``,
    ``grad``, ``functional_call`` under them): a gradoc hook there does nothing (no graph
    break, no side effect frozen at trace time; a batched tensor is no value to read)."""
    if compiling():
        return True
    return _FUNCTORCH is not None and _FUNCTORCH() is not None


def quiet_compile_warning() -> None:
    """torch.compile warns that global module hooks fire once more for its wrapper; the
    hooks are gradoc's, which knows (and the user's stderr stays as without gradoc)."""
    warnings.filterwarnings(
        "ignore", message=r"Using `torch.compile\(module\)` when there are global hooks"
    )


def unwrap(module: nn.Module) -> nn.Module:
    """The user's module inside DDP, DataParallel and ``torch.compile`` (in any nesting):
    its names have no ``module.`` or ``_orig_mod.``, and a replay of it runs eagerly on one
    rank."""
    while True:
        if isinstance(module, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            module = module.module
        elif compiled(module):
            module = module._orig_mod  # type: ignore[assignment]
        else:
            return module
