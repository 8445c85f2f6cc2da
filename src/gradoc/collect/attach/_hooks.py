"""Forward hooks on a watched model that do not travel with it.

A hook registered with ``module.register_forward_hook`` lives in the module's
``_forward_hooks`` dict, so ``pickle``, ``copy.deepcopy`` and ``torch.save(model)`` carry
it, and with it gradoc's run (a SQLite connection, a thread): ``torch.save(model)`` failed
under gradoc. Global hooks (``register_module_forward_hook``) travel nowhere, but they put
every module of the process on ``nn.Module``'s slow call path: ~6 µs a module call on the
development machine, on every step, which grows with the number of modules.

So a watched root gets hook dicts of type :class:`LocalHooks`: an ``OrderedDict`` that
leaves gradoc's entries out when it is pickled or copied, and is otherwise the same dict.
That is only done when the root has no forward hooks yet: the ``RemovableHandle`` of a
hook someone registered before must keep pointing at the dict that holds it. A root that
already has forward hooks is watched through global hooks instead (slower, never wrong).
Once swapped, a dict stays (empty of gradoc's entries after ``remove``), because handles
of hooks added later point at it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch.nn as nn
from torch.utils.hooks import RemovableHandle

from ..._util import entry

_DICTS = ("_forward_pre_hooks", "_forward_hooks", "_forward_hooks_with_kwargs")
"""The dicts ``register_forward_pre_hook`` and ``register_forward_hook(with_kwargs=True)``
write to."""


_REDUCE = "collect.attach._hooks.LocalHooks.__reduce_ex__"


class LocalHooks(OrderedDict[int, Any]):
    """A module's hook dict whose gradoc entries stay behind in pickles and copies."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ours: set[int] = set()

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        # what pickle, copy.copy and copy.deepcopy see: a plain OrderedDict without gradoc
        # (called by the program's pickling: an entry; should it fail, the copy has no hooks
        # rather than gradoc's, which cannot be pickled)
        return entry.call(self._without_ours, where=_REDUCE, fallback=(OrderedDict, ()))  # type: ignore[no-any-return]

    def _without_ours(self) -> tuple[Any, ...]:
        mine = [(k, v) for k, v in self.items() if k not in self.ours]  # here, not in pickle
        return (OrderedDict, (), None, None, iter(mine))

    def __reduce__(self) -> tuple[Any, ...]:
        return self.__reduce_ex__(2)


def _local(module: nn.Module) -> list[LocalHooks] | None:
    """The root's hook dicts as ``LocalHooks`` (swapped in if empty), or None."""
    found = [module.__dict__.get(name) for name in _DICTS]
    if not all(isinstance(d, LocalHooks) or (type(d) is OrderedDict and not d) for d in found):
        return None
    dicts = []
    for name, d in zip(_DICTS, found):
        if not isinstance(d, LocalHooks):
            d = LocalHooks()
            object.__setattr__(module, name, d)
        dicts.append(d)
    return dicts


def local_hooks(
    module: nn.Module,
    pre: Callable[[nn.Module, Any], None],
    post: Callable[[nn.Module, Any, Any, Any], None],
) -> list[RemovableHandle] | None:
    """Call ``pre(module, args)`` before and ``post(module, args, kwargs, output)`` after
    every forward of ``module``, from hooks that stay out of its pickles and copies; None
    when the module already has forward hooks (then use :func:`global_hooks`)."""
    dicts = _local(module)
    if dicts is None:
        return None
    handles = [
        entry.forward_pre_hook(module, pre),
        entry.forward_hook(module, post, with_kwargs=True),
    ]
    for d in dicts:
        d.ours.update(h.id for h in handles)
    return handles


def global_hooks(
    pre: Callable[[nn.Module, Any], None],
    post: Callable[[nn.Module, Any, Any, Any], None],
) -> list[RemovableHandle]:
    """The same for every module of the process: the callbacks must filter."""
    return [entry.every_forward_pre_hook(pre), entry.every_forward_hook(post, with_kwargs=True)]
