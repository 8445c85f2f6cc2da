"""The program's modules, read as PyTorch keeps them: never through a name it may have
shadowed, never through its ``__getattr__``, ``__eq__`` or ``__hash__``.

A program owns its modules' namespace. A RealNVP flow keeps its layers in a plain list named
``self.modules``, which shadows ``nn.Module.modules()``: ``m.modules()`` is then a call of
a list. A wrapper's ``__getattr__`` may raise or compute; a module may define ``__eq__``
(and so have no hash), or a hash by value that makes two layers one key. PyTorch's own
``named_modules`` recurses through each child's attribute of that name and hashes modules
into a memo. So gradoc walks what ``nn.Module`` itself stores: the ``_modules``,
``_parameters`` and ``_buffers`` dicts of each module's ``__dict__``, each module once by
identity, in the order ``model.named_modules()`` gives (its names are the layers' names).
Attributes are read from the instance and its class without running a property or a
``__getattr__`` (:func:`attribute`).
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from typing import Any, Generic, TypeVar, overload

import torch
import torch.nn as nn
from torch import Tensor

_MISSING = object()


def instance_dict(obj: Any) -> dict[str, Any]:
    """``obj.__dict__`` as ``object`` defines it (``{}`` for an object without one)."""
    try:
        found = object.__getattribute__(obj, "__dict__")
    except Exception:
        return {}
    return found if isinstance(found, dict) else {}


def _own(module: nn.Module, store: str) -> dict[str, Any]:
    """One of the dicts ``nn.Module`` keeps its members in (``_modules``, ...)."""
    found = instance_dict(module).get(store)
    return found if isinstance(found, dict) else {}


def named_modules(module: nn.Module, prefix: str = "") -> list[tuple[str, nn.Module]]:
    """``module.named_modules(prefix=prefix)``: every module under ``module`` (itself first)
    once, with its qualified name, in PyTorch's order."""
    out: list[tuple[str, nn.Module]] = []
    seen: set[int] = set()
    todo: list[tuple[str, nn.Module]] = [(prefix, module)]
    while todo:
        name, m = todo.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        out.append((name, m))
        kids = [
            (f"{name}.{k}" if name else k, c)
            for k, c in _own(m, "_modules").items()
            if isinstance(c, nn.Module)
        ]
        todo.extend(reversed(kids))
    return out


def modules(module: nn.Module) -> list[nn.Module]:
    """``module.modules()``."""
    return [m for _, m in named_modules(module)]


def named_children(module: nn.Module) -> list[tuple[str, nn.Module]]:
    """``module.named_children()``."""
    out: list[tuple[str, nn.Module]] = []
    seen: set[int] = set()
    for k, c in _own(module, "_modules").items():
        if isinstance(c, nn.Module) and id(c) not in seen:
            seen.add(id(c))
            out.append((k, c))
    return out


def children(module: nn.Module) -> list[nn.Module]:
    """``module.children()``."""
    return [c for _, c in named_children(module)]


def _members(module: nn.Module, store: str, recurse: bool) -> Iterator[tuple[str, Tensor]]:
    seen: set[int] = set()
    for prefix, m in named_modules(module) if recurse else [("", module)]:
        for k, t in _own(m, store).items():
            if isinstance(t, Tensor) and id(t) not in seen:
                seen.add(id(t))
                yield (f"{prefix}.{k}" if prefix else k), t


def named_parameters(module: nn.Module, recurse: bool = True) -> list[tuple[str, Tensor]]:
    """``module.named_parameters(recurse=recurse)``: a parameter shared by two modules once,
    under its first name."""
    return list(_members(module, "_parameters", recurse))


def parameters(module: nn.Module, recurse: bool = True) -> list[Tensor]:
    """``module.parameters(recurse=recurse)``."""
    return [p for _, p in _members(module, "_parameters", recurse)]


def named_buffers(module: nn.Module, recurse: bool = True) -> list[tuple[str, Tensor]]:
    """``module.named_buffers(recurse=recurse)``."""
    return list(_members(module, "_buffers", recurse))


def zero_grad(module: nn.Module) -> None:
    """``module.zero_grad(set_to_none=True)``."""
    for p in parameters(module):
        p.grad = None


def training(module: nn.Module) -> bool:
    """``module.training`` as ``nn.Module.train()`` sets it (True where a class made it a
    property: nothing of the program's runs to read it)."""
    value = attribute(module, "training", True)
    return value if isinstance(value, bool) else True


def attribute(obj: Any, name: str, default: Any = None) -> Any:
    """``getattr(obj, name, default)`` without running the program's code: the instance's
    own value, a module's parameter, buffer or submodule, or a plain class attribute; a
    property, a ``__getattr__`` or anything else that would run code gives ``default``."""
    own = instance_dict(obj)
    if name in own:
        return own[name]
    if isinstance(obj, nn.Module):
        for store in ("_parameters", "_buffers", "_modules"):
            found = _own(obj, store).get(name, _MISSING)
            if found is not _MISSING:
                return found
    try:
        found = inspect.getattr_static(type(obj), name, _MISSING)
    except Exception:
        return default
    if found is _MISSING or hasattr(type(found), "__get__"):
        return default  # absent, or a descriptor (a property, a method): not a value
    return found


def stepped(optimizer: Any) -> Any:
    """The optimizer whose steps PyTorch's step hooks see: ``optimizer``, or, for a wrapper
    that never called ``Optimizer.__init__`` (Lookahead as it is usually written: it has no
    hooks of its own), the optimizer it holds and shares its ``param_groups`` with."""
    own = instance_dict(optimizer)
    if isinstance(own.get("_optimizer_step_pre_hooks"), dict):
        return optimizer
    for held in own.values():
        shares = attribute(held, "param_groups") is own.get("param_groups")
        if held is not optimizer and isinstance(held, torch.optim.Optimizer) and shares:
            return stepped(held)
    return optimizer


K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")


class _Held:
    """A strong reference read as a weak one is: ``held()`` is the object."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __call__(self) -> Any:
        return self.obj


class IdMap(MutableMapping[K, V]):
    """A dict keyed by the keys' identity: a module's or an optimizer's own ``__hash__`` and
    ``__eq__`` are never asked (one that has none, or a hash by value, is still one key).
    It holds its keys, as a dict does."""

    __slots__ = ("_d",)

    def __init__(self, items: Iterable[tuple[K, V]] = ()) -> None:
        self._d: dict[int, tuple[Callable[[], Any], V]] = {}
        for k, v in items:
            self[k] = v

    def _hold(self, key: Any) -> Callable[[], Any]:
        return _Held(key)

    @overload
    def get(self, key: object, /) -> V | None: ...
    @overload
    def get(self, key: object, default: V | T, /) -> V | T: ...
    def get(self, key: object, default: Any = None, /) -> Any:
        found = self._d.get(id(key))
        return found[1] if found is not None and found[0]() is key else default

    def __getitem__(self, key: K) -> V:
        found = self._d.get(id(key))
        if found is None or found[0]() is not key:
            raise KeyError(id(key))
        return found[1]

    def __setitem__(self, key: K, value: V) -> None:
        self._d[id(key)] = (self._hold(key), value)

    def __delitem__(self, key: K) -> None:
        self[key]
        del self._d[id(key)]

    def __contains__(self, key: object) -> bool:
        found = self._d.get(id(key))
        return found is not None and found[0]() is key

    def __iter__(self) -> Iterator[K]:
        held = [r() for r, _ in list(self._d.values())]
        return iter([k for k in held if k is not None])

    def __len__(self) -> int:
        return len(self._d)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self._d)} keys)"


class WeakIdMap(IdMap[K, V]):
    """:class:`IdMap` that does not keep its keys alive (``weakref.WeakKeyDictionary``,
    which hashes them, by identity): a key's entry goes with it."""

    __slots__ = ()

    def _hold(self, key: Any) -> Callable[[], Any]:
        store, key_id = self._d, id(key)

        def gone(ref: Any) -> None:
            found = store.get(key_id)
            if found is not None and found[0] is ref:
                del store[key_id]

        return weakref.ref(key, gone)


class WeakIdSet(Generic[T]):
    """``weakref.WeakSet`` by identity (see :class:`WeakIdMap`), in the order added."""

    __slots__ = ("_map",)

    def __init__(self) -> None:
        self._map: WeakIdMap[T, None] = WeakIdMap()

    def add(self, item: T) -> None:
        self._map[item] = None

    def discard(self, item: T) -> None:
        self._map.pop(item, None)

    def __contains__(self, item: object) -> bool:
        return item in self._map

    def __iter__(self) -> Iterator[T]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)

    def __bool__(self) -> bool:
        return any(True for _ in self._map)
