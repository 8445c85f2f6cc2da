"""Replacing a library function process-wide, safely: the one way gradoc does it.

PyTorch has no hook where gradoc needs one (``torch.autograd.backward``, an LR scheduler's
``step``), so the function is replaced by a wrapper. Wrappers must compose with anyone
else's: a wrapper installed over gradoc's while it is in place must survive gradoc's
removal. So :meth:`Patch.remove` puts the original back only if gradoc's wrapper is still
the installed function; otherwise the wrapper stays in the other one's chain, turned into
a pass-through, and is switched on again (not stacked) by the next :meth:`Patch.install`.
The wrapper is an entry point (``entry.wrapped``): a failure of gradoc's in it stops
gradoc, never the program, whose call is made exactly once.

>>> import types
>>> lib = types.SimpleNamespace(f=lambda x: x + 1)
>>> p = Patch(lib, "f", lambda original: lambda x: original(x) * 10)
>>> p.install(); lib.f(1)
20
>>> theirs = lib.f; lib.f = lambda x: theirs(x) - 1  # someone wraps gradoc's wrapper
>>> p.remove(); lib.f(1)  # theirs survives; gradoc's part is a pass-through now
1
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from . import entry


class Patch:
    """``owner.name`` replaced by ``make(original)`` while installed."""

    def __init__(
        self,
        owner: Any,
        name: str,
        make: Callable[[Callable[..., Any]], Callable[..., Any]],
        prepare: entry.Prepare | None = None,
    ) -> None:
        """``prepare``: the call's arguments made safe to read twice (``entry.wrapped``)."""
        self.owner, self.name, self.make, self.prepare = owner, name, make, prepare
        self.where = f"patch of {getattr(owner, '__name__', type(owner).__name__)}.{name}"
        self._original: Callable[..., Any] | None = None
        self._inherited = False
        self._wrapper: Callable[..., Any] | None = None
        self._on = [False]  # this wrapper's switch (a new wrapper gets a new one)

    @property
    def active(self) -> bool:
        return self._on[0]

    def _current(self) -> Any:
        # a class's own attribute (a subclass that inherits it is wrapped through it), else
        # the one it inherits (``Tensor.item`` is ``TensorBase``'s)
        if isinstance(self.owner, type) and self.name in self.owner.__dict__:
            return self.owner.__dict__[self.name]
        return getattr(self.owner, self.name)

    def _restore(self) -> None:
        """Put the original back; an inherited one by removing the class's own attribute."""
        if isinstance(self.owner, type) and self._inherited:
            delattr(self.owner, self.name)
        else:
            setattr(self.owner, self.name, self._original)

    def install(self) -> None:
        if self._on[0]:
            return
        if self._wrapper is not None and self._current() is self._original:
            setattr(self.owner, self.name, self._wrapper)  # put back: the same wrapper
            self._on[0] = True
            return
        if self._wrapper is not None and self._in_chain():
            self._on[0] = True  # still inside someone else's wrapper: switched on again
            return
        self._inherited = isinstance(self.owner, type) and self.name not in self.owner.__dict__
        original, on = self._current(), [True]
        # an entry point (``entry.wrapped``): the original is called exactly once whatever
        # gradoc's part does, and a failure of gradoc's stops it, never the program
        made = entry.wrapped(original, self.make, self.where, on, self.prepare)
        wrapper = functools.wraps(original)(made)
        self._original, self._wrapper, self._on = original, wrapper, on
        setattr(self.owner, self.name, wrapper)

    def switch(self, on: bool) -> None:
        """Turn an installed wrapper into a pass-through (``on=False``) and back, leaving it
        in place: no write to the patched class, whose every lookup a write slows (Python
        drops its method caches and specialised bytecode for the class and its subclasses:
        ~0.1 ms of a training step for ``Tensor``)."""
        if self._wrapper is not None and self._current() is self._wrapper:
            self._on[0] = on

    def _in_chain(self) -> bool:
        """gradoc's wrapper is still reached from the installed function (through the
        ``__wrapped__`` that ``functools.wraps`` leaves)."""
        fn = self._current()
        for _ in range(64):
            if fn is None or fn is self._wrapper:
                break
            fn = getattr(fn, "__wrapped__", None)
        return fn is not None and fn is self._wrapper

    def remove(self) -> None:
        if not self._on[0]:
            return
        self._on[0] = False
        if self._current() is self._wrapper:
            self._restore()  # the wrapper is kept for reuse
        # else: someone wrapped it meanwhile; it stays in their chain, passing calls through
