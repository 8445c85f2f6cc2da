"""Which module is running: the module stack a trace attributes each op to, and the
eager stance that shows a compiled model's ops to it."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import torch.nn as nn

from .._util import entry, objects
from .._util.tree import floats
from .._util.wrappers import quiet_compile_warning, traced, unwrap


class ModuleStack:
    """The modules whose forward is running, innermost last, named as the user knows them.

    Global forward hooks, installed only while tracing: every module of the process is
    seen, also one called in a Python loop (an RNN cell) and one outside any watched
    model. A module is named from ``names`` (the run's watched models), else relative to
    the running module that holds it (``transformer.h.0.attn``), else by its class (an
    outermost module nobody named). On leaving a module, the autograd nodes its forward
    created are tagged with its name, so a backward op is attributed to the module whose
    forward made it.
    """

    def __init__(self, names: Mapping[nn.Module, str] | None = None) -> None:
        self.names = names if names is not None else {}
        self.stack: list[str] = []
        self._modules: list[nn.Module] = []
        self._inputs: list[set[int]] = []
        self._found: dict[tuple[int, int], str | None] = {}
        self._anonymous: set[int] = set()
        self._derived: dict[int, str] = {}  # modules named here (the run's names stay)
        self._handles: list[Any] = []

    def __enter__(self) -> ModuleStack:
        quiet_compile_warning()
        self._handles = [
            entry.every_forward_pre_hook(self._enter),
            entry.every_forward_hook(self._leave, always_call=True),
        ]
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        self.stack.clear()
        self._modules.clear()
        self._inputs.clear()

    def name(self, module: nn.Module) -> str | None:
        known = self.names.get(module, self._derived.get(id(module)))
        if known is not None:
            return known
        for parent, pname in zip(reversed(self._modules), reversed(self.stack)):
            key = (id(parent), id(module))
            if key not in self._found:  # once per (holder, module): this runs on every call
                # a compiled or DDP wrapper's names are the user's, without `_orig_mod.`
                inner = unwrap(parent)
                self._found[key] = next(
                    (n for n, m in objects.named_modules(inner) if m is module and n), None
                )
            found = self._found[key]
            if found is not None:  # relative to a root nobody named, as named_modules() is
                named = pname and id(parent) not in self._anonymous
                return f"{pname}.{found}" if named else found
        return None

    def _enter(self, module: nn.Module, args: Any) -> None:
        if traced():
            return
        name = self.name(module)
        if name is None:
            name = self._derived[id(module)] = type(module).__name__  # outermost, unnamed
            self._anonymous.add(id(module))
        self.stack.append(name)
        self._modules.append(module)
        self._inputs.append({id(t.grad_fn) for t in floats(args) if t.grad_fn is not None})

    def _leave(self, module: nn.Module, args: Any, output: Any) -> None:
        if traced():
            return
        if not self._modules or self._modules[-1] is not module:
            return  # entered before the stack was installed
        name = self.stack.pop()
        self._modules.pop()
        before = self._inputs.pop()
        # tag the autograd nodes this module created (inner modules tagged theirs first),
        # stopping where its inputs were made: those belong to the code before it
        todo: list[Any] = [t.grad_fn for t in floats(output) if t.grad_fn is not None]
        seen: set[int] = set()
        while todo:
            node = todo.pop()
            if node is None or id(node) in before or id(node) in seen:
                continue
            seen.add(id(node))
            node.metadata.setdefault("gradoc_module", name)
            todo.extend(fn for fn, _ in node.next_functions)


def stance_eager(load: bool = True) -> Any:
    """Run compiled code eagerly while checking: a compiled graph hides its ops from the
    tracer. ``load=False``: only when torch.compile is loaded already (it takes a second to
    import; a program that has not imported it has compiled nothing yet)."""
    if not load and "torch._dynamo" not in sys.modules:
        return None
    try:
        from torch._dynamo.eval_frame import DynamoStance, _set_stance

        return _set_stance(DynamoStance("force_eager"))
    except (ImportError, RuntimeError):  # an old torch, or inside a compiled region
        return None


def stance_restore(before: Any) -> None:
    if before is not None:
        from torch._dynamo.eval_frame import _set_stance

        _set_stance(before)
