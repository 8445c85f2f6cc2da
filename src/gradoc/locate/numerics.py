"""Check numerics: every operation of a block of code checked as it runs.

``gradoc.check_numerics()`` (and ``gradoc run --check numerics``) traces every aten op of
the forward and, as the autograd engine runs in the calling thread, of the backward, from
the start of the block: the first op whose finite inputs gave a non-finite output is the
birth. It is reported with its op, the innermost module whose forward was running, the
user's file, line and code (for a backward op, the forward line that made its autograd
node), the operands' evidence and the phase, wherever it happens: in a model, in a
training loop's loss, in a program that never trains. Like TensorFlow's
``enable_check_numerics`` and JAX's ``jax_debug_nans``, with the backward and the user's
own line.

>>> import torch, gradoc
>>> model = torch.nn.Linear(4, 1)
>>> with gradoc.check_numerics(raise_error=False) as check:
...     loss = model(torch.randn(8, 4)).log().mean()  # log of negative outputs: NaN
>>> check.origin.op, check.origin.phase
('aten.log.default', 'forward')
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

import torch.nn as nn

from .._util.entry import Deliberate
from ..detect.finding import Origin
from .replay import ArmedTrace, origin_from


class NumericsError(FloatingPointError, Deliberate):
    """Raised by :func:`check_numerics` at the first operation that made a NaN/Inf."""

    def __init__(self, origin: Origin) -> None:
        super().__init__(describe_origin(origin))
        self.origin = origin


def describe_origin(origin: Origin) -> str:
    """One line: ``forward: aten.log.default in model.head (train.py:12: `...`)``."""
    where = f" in {origin.module}" if origin.module else ""
    at = f" ({origin.file}:{origin.line}: `{origin.code}`)" if origin.file else ""
    evidence = "; ".join(f"{e.signal}: {e.value}" for e in origin.evidence[:3])
    return f"{origin.phase}: {origin.op}{where}{at}" + (f" [{evidence}]" if evidence else "")


class CheckNumerics:
    """The state of a :func:`check_numerics` block: ``origin`` once a birth was seen."""

    def __init__(
        self,
        names: Mapping[nn.Module, str] | None = None,
        raise_error: bool = True,
        on_found: Callable[[Origin], None] | None = None,
    ) -> None:
        """``names``: the modules' names (a watched run's); ``on_found``: told of the
        birth when it happens (``gradoc run --check numerics`` sets its step)."""
        self.trace = ArmedTrace(names, on_found=self._found, load_compiler=True)
        self.raise_error = raise_error
        self.origin: Origin | None = None
        self._on_found = on_found

    def __enter__(self) -> CheckNumerics:
        self.trace.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.trace.stop()

    def _found(self) -> None:
        found = self.trace.tracer.found
        assert found is not None
        self.origin = origin_from(0, found)
        if self._on_found is not None:
            self._on_found(self.origin)
        if self.raise_error:
            raise NumericsError(self.origin)


@contextmanager
def check_numerics(raise_error: bool = True) -> Iterator[CheckNumerics]:
    """Check every operation in the block; the first that turns finite inputs into NaN/Inf
    raises :class:`NumericsError` (a ``FloatingPointError``) naming its op, module, file,
    line and phase; with ``raise_error=False`` the block runs on and ``.origin`` holds it.

    Costs what a check of every op's output costs (the docs' Locating NaNs page has the
    table); for watching a whole training run at near-zero cost use ``gradoc.watch``, which
    locates the first non-finite step by replaying it.
    """
    check = CheckNumerics(raise_error=raise_error)
    with check:
        yield check
    if check.origin is not None and not raise_error:
        print(f"gradoc: NaN/Inf born at {describe_origin(check.origin)}", file=sys.stderr)
