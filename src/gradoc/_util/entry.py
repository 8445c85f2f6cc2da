"""Every place PyTorch or the program calls into gradoc, under one guard.

gradoc runs inside the user's process, called from the user's code and from PyTorch's:
module forward hooks, optimizer step hooks, tensor and autograd-node hooks, the functions
it wraps (``torch.autograd.backward``, ``Tensor.item``: ``patch.Patch``), a closure it hands
to an optimizer, a dispatch mode, its SIGTERM handler, its exit handler, Jupyter's display.
An exception of gradoc's in any of them would be the program's exception: a model that
keeps its layers in a list named ``modules`` died in gradoc's optimizer hook, at its first
step. So every one of them is registered here, wrapped in the same guard:

- an exception (not a :class:`Deliberate` one: the guard giving up, ``check_numerics``'
  error) stops gradoc's monitoring: every entry from then on does nothing and returns what
  the program would have seen without gradoc (``None`` from a hook: the output, the
  arguments and the gradient unchanged; a wrapped function's own result, called exactly
  once, its own exception raised as it was);
- it is said once on stderr, and the listeners (the open runs: ``collect._safety``) record
  it as an event with its traceback;
- the program goes on as it would have.

A new run clears the failure (:func:`reset`): its entries run again.

``tests/test_entry.py`` reads every module of gradoc and fails on a hook registered, a
signal handler set, an exit handler or a dispatch mode made anywhere but here: guarding is
structural, not a ``try`` put where a crash was seen. The same tests make each entry of a
run fail in turn (``GRADOC_FAULT``, below) and compare the program's output with its plain
run.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn
from torch.nn.modules import module as _module
from torch.optim import Optimizer
from torch.optim import optimizer as _optimizer
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.hooks import RemovableHandle

GUARDED = "__gradoc_guarded__"
"""The attribute that marks a callable already guarded (registered as it is)."""


class Deliberate(Exception):
    """An exception gradoc raises on purpose from an entry point, for the program to see:
    the guard giving up on a run, ``check_numerics``' error, a tool stopping the script it
    runs. The guard passes it on."""


class InjectedFault(RuntimeError):
    """The failure ``GRADOC_FAULT`` injects into an entry (tests only)."""


_broken = [False]
"""gradoc failed: every entry is a pass-through until :func:`reset`."""
_said = [False]
_failures = [0]
_listeners: list[Callable[[str, str], None]] = []


def _faults() -> dict[str, str]:
    """``GRADOC_FAULT=NAME[:after][,NAME...]``: the entries that fail, and when (tests)."""
    out: dict[str, str] = {}
    for part in os.environ.get("GRADOC_FAULT", "").split(","):
        name, _, when = part.strip().partition(":")
        if name:
            out[name] = when or "before"
    return out


_cells: dict[str, list[str | None]] = {}
"""Each entry's name (its function's module and qualified name) and its fault: None, or
``before`` / ``after`` the work it wraps (``GRADOC_FAULT``, :func:`inject`). Every entry
checks its cell at each call: one comparison."""
_FAULTS = _faults()


def _cell(where: str) -> list[str | None]:
    cell = _cells.get(where)
    if cell is None:
        cell = _cells[where] = [_FAULTS.get(where)]
    return cell


def entries() -> list[str]:
    """The names of the entries made so far (guarded methods from their module's import,
    hooks from their registration): what the fault tests make fail in turn."""
    return sorted(_cells)


def inject(where: str, when: str | None) -> None:
    """Make the entry ``where`` fail ``before`` or ``after`` its work (None: not), from its
    next call on (tests; ``GRADOC_FAULT`` does it for a whole process)."""
    _cell(where)[0] = when


def fault(cell: list[str | None], when: str, where: str) -> None:
    """Raise the fault injected into the entry ``where``, if it is due ``when`` (``before``
    or ``after`` its work)."""
    if cell[0] == when:
        raise InjectedFault(f"injected into {where} ({when} its work)")


def broken() -> bool:
    """gradoc failed since the last :func:`reset`."""
    return _broken[0]


def failures() -> int:
    """How many times gradoc failed in this process (a tool compares before and after its
    measurement: a measurement its hooks failed in is not given)."""
    return _failures[0]


def reset() -> None:
    """A run opens: entries run again, and a new failure is said again."""
    _broken[0] = _said[0] = False


def on_failure(listener: Callable[[str, str], None]) -> None:
    """Call ``listener(message, traceback)`` at each failure (the open runs record it)."""
    if listener not in _listeners:
        _listeners.append(listener)


def failed(exc: BaseException, where: str) -> None:
    """gradoc failed in ``where``: monitoring stops, said once, recorded by the listeners."""
    _broken[0] = True
    _failures[0] += 1
    message = f"internal error in {where}: {type(exc).__name__}: {exc}"
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if not _said[0]:
        _said[0] = True
        with contextlib.suppress(Exception):  # no stderr to say it on: the run log has it
            print(
                f"gradoc: {_one_line(message)}; monitoring stopped, the program goes on "
                "(the traceback is in the run log)",
                file=sys.stderr,
            )
    for listener in list(_listeners):
        try:
            listener(message, trace)
        except Exception:
            continue


def _one_line(text: str) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= 300 else line[:297] + "..."


def name_of(fn: Any) -> str:
    """An entry's name: its function's module (without ``gradoc.``) and qualified name."""
    fn = getattr(fn, "__func__", fn)
    module = (getattr(fn, "__module__", None) or "").removeprefix("gradoc.")
    return f"{module}.{getattr(fn, '__qualname__', type(fn).__name__)}"


def guard(
    fn: Callable[..., Any], where: str | None = None, fallback: Any = None, always: bool = False
) -> Any:
    """``fn`` as an entry point: once gradoc failed, or when ``fn`` raises, it returns
    ``fallback`` (what the program sees without gradoc). ``always``: it runs even once gradoc
    failed (what closes a run: its log is written whatever happened). Already guarded:
    ``fn`` itself."""
    if getattr(fn, GUARDED, False):
        return fn
    where = where or name_of(fn)
    cell = _cell(where)

    def entry(*args: Any, **kwargs: Any) -> Any:
        if _broken[0] and not always:
            return fallback
        try:
            if cell[0] is None:
                return fn(*args, **kwargs)
            fault(cell, "before", where)
            result = fn(*args, **kwargs)
            fault(cell, "after", where)
            return result
        except Deliberate:
            raise
        except Exception as exc:
            failed(exc, where)
            return fallback

    setattr(entry, GUARDED, True)
    entry.__wrapped__ = fn  # type: ignore[attr-defined]
    return entry


def fault_cell(where: str) -> list[str | None]:
    """The fault cell of an entry guarded by its own means (``collect._safety.guarded``,
    which stops its run): it calls :func:`fault` before and after its work."""
    return _cell(where)


# -- wrapped functions: the program's call goes through, exactly once ---------------------
Prepare = Callable[[tuple[Any, ...], dict[str, Any]], tuple[tuple[Any, ...], dict[str, Any]]]
"""What makes a wrapped call's arguments safe to read twice (see :func:`wrapped`)."""

_NOT_CALLED, _RETURNED, _RAISED = 0, 1, 2
"""A wrapped call's record (a two-item list, cheaper than an object): [what the program's
call did, its result or its exception]."""


def wrapped(
    original: Callable[..., Any],
    make: Callable[[Callable[..., Any]], Callable[..., Any]],
    where: str,
    on: list[bool] | None = None,
    prepare: Prepare | None = None,
) -> Callable[..., Any]:
    """``make(call)``'s function in place of ``original``, where ``call`` is ``original``,
    watched: whatever gradoc's part of it does, the program's call is made exactly once and
    what it returned or raised is what the program gets. gradoc failing before the call:
    the call is made; after it: its result is returned; while its exception passed: that
    exception is raised. ``on``: a switch (``[False]``: a pass-through). ``prepare(args,
    kwargs)``: the arguments as gradoc's part and the call both use them, made before either
    (a generator of parameters turned into a list, which the call takes alike: a part that
    consumed it and then failed would leave the call none).

    NOTE: every ``backward()`` and ``item()`` of the program passes here: a record per call
    on a per-thread stack, ~0.3 us, and nothing else."""
    local = threading.local()
    cell = _cell(where)

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            record = local.stack[-1]
        except (AttributeError, IndexError):  # called outside the wrapper (make's own use)
            record = None
        if cell[0] is not None:
            fault(cell, "before", where)
        try:
            result = original(*args, **kwargs)
        except BaseException as exc:
            if record is not None:
                record[0], record[1] = _RAISED, exc
            raise
        if record is not None:
            record[0], record[1] = _RETURNED, result
        if cell[0] is not None:
            fault(cell, "after", where)
        return result

    inner = make(call)
    switch = on if on is not None else [True]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not switch[0] or _broken[0]:
            return original(*args, **kwargs)
        if prepare is not None:
            args, kwargs = prepare(args, kwargs)
        try:
            stack = local.stack
        except AttributeError:
            stack = local.stack = []
        record: list[Any] = [_NOT_CALLED, None]
        stack.append(record)
        try:
            return inner(*args, **kwargs)
        except Exception as exc:
            if record[0] == _RAISED:
                if exc is record[1]:
                    raise  # the program's own error, as without gradoc
                failed(exc, where)
                raise record[1] from None
            if isinstance(exc, Deliberate):
                raise
            failed(exc, where)
            if record[0] == _RETURNED:
                return record[1]
            return original(*args, **kwargs)
        finally:
            stack.pop()

    setattr(wrapper, GUARDED, True)
    return wrapper


def call(fn: Callable[..., Any], *args: Any, where: str, fallback: Any = None) -> Any:
    """``fn(*args)`` called by the program through a method gradoc defines (Jupyter's
    ``_repr_html_``, pickle's ``__reduce_ex__``): ``fallback`` when gradoc failed."""
    if _broken[0]:
        return fallback
    try:
        return fn(*args)
    except Deliberate:
        raise
    except Exception as exc:
        failed(exc, where)
        return fallback


# -- module hooks ---------------------------------------------------------------------------
def forward_pre_hook(module: nn.Module, fn: Callable[..., Any]) -> RemovableHandle:
    """``fn(module, args)`` before every forward of ``module``."""
    return nn.Module.register_forward_pre_hook(module, guard(fn))


def forward_hook(
    module: nn.Module, fn: Callable[..., Any], *, with_kwargs: bool = False
) -> RemovableHandle:
    """``fn(module, args, output)`` (``with_kwargs``: ``fn(module, args, kwargs, output)``)
    after every forward of ``module``."""
    return nn.Module.register_forward_hook(module, guard(fn), with_kwargs=with_kwargs)


def backward_pre_hook(module: nn.Module, fn: Callable[..., Any]) -> RemovableHandle:
    return nn.Module.register_full_backward_pre_hook(module, guard(fn))


def backward_hook(module: nn.Module, fn: Callable[..., Any]) -> RemovableHandle:
    return nn.Module.register_full_backward_hook(module, guard(fn))


def every_forward_pre_hook(fn: Callable[..., Any]) -> RemovableHandle:
    """``fn(module, args)`` before the forward of every module of the process."""
    return _module.register_module_forward_pre_hook(guard(fn))


def every_forward_hook(
    fn: Callable[..., Any], *, with_kwargs: bool = False, always_call: bool = False
) -> RemovableHandle:
    """``fn(module, args[, kwargs], output)`` after the forward of every module."""
    return _module.register_module_forward_hook(
        guard(fn), with_kwargs=with_kwargs, always_call=always_call
    )


# -- optimizer hooks ------------------------------------------------------------------------
def step_pre_hook(optimizer: Optimizer, fn: Callable[..., Any]) -> RemovableHandle:
    """``fn(optimizer, args, kwargs)`` before ``optimizer.step()``; what it returns (new
    ``(args, kwargs)`` or None) is what the step gets."""
    return Optimizer.register_step_pre_hook(optimizer, guard(fn))


def step_post_hook(optimizer: Optimizer, fn: Callable[..., Any]) -> RemovableHandle:
    return Optimizer.register_step_post_hook(optimizer, guard(fn))


def every_step_pre_hook(fn: Callable[..., Any]) -> RemovableHandle:
    """``fn(optimizer, args, kwargs)`` before every optimizer's step."""
    return _optimizer.register_optimizer_step_pre_hook(guard(fn))


def every_step_post_hook(fn: Callable[..., Any]) -> RemovableHandle:
    return _optimizer.register_optimizer_step_post_hook(guard(fn))


# -- autograd hooks -------------------------------------------------------------------------
def tensor_hook(tensor: torch.Tensor, fn: Callable[..., Any]) -> RemovableHandle:
    """``fn(grad)`` when ``tensor``'s gradient is computed; it changes nothing (None).
    A list's ``append`` is registered as it is: the backward then calls no Python frame of
    gradoc's, and appending cannot fail."""
    hook = fn if _appends(fn) else guard(fn)
    return torch.Tensor.register_hook(tensor, hook)  # type: ignore[no-any-return]


def gradients_into(tensor: torch.Tensor, into: list[Any]) -> int | None:
    """Keep what the backward computes for ``tensor`` in ``into``: the gradients its node
    receives, appended as they come (a tuple; ``tensor``'s is at the index returned), or for
    a leaf its gradient itself (None returned). ``into.append`` is registered as it is: the
    backward calls no Python frame of gradoc's, appending cannot fail, and a node's pre-hook
    costs less than a tensor hook's Python (locate's forward, every step: 8.2 us against 9.5)."""
    node = tensor.grad_fn
    if node is None:
        torch.Tensor.register_hook(tensor, into.append)
        return None
    node.register_prehook(into.append)
    return int(tensor.output_nr)


def _appends(fn: Any) -> bool:
    return getattr(fn, "__name__", None) == "append" and isinstance(
        getattr(fn, "__self__", None), list
    )


def node_prehook(node: Any, fn: Callable[..., Any]) -> Any:
    """``fn(grad_outputs)`` before the autograd ``node`` runs; it changes nothing."""
    return node.register_prehook(guard(fn))


def saved_tensors_hooks(
    pack: Callable[[torch.Tensor], Any],
) -> torch.autograd.graph.saved_tensors_hooks:
    """``torch.autograd.graph.saved_tensors_hooks`` whose ``pack`` only looks: it is handed
    each tensor autograd saves and the tensor itself is kept (also when gradoc fails)."""

    def look(t: torch.Tensor) -> torch.Tensor:
        if not _broken[0]:
            try:
                pack(t)
            except Exception as exc:
                failed(exc, name_of(pack))
        return t

    return torch.autograd.graph.saved_tensors_hooks(look, _unpacked)


def _unpacked(t: torch.Tensor) -> torch.Tensor:
    return t


# -- dispatch modes -------------------------------------------------------------------------
class ObservingMode(TorchDispatchMode):
    """A dispatch mode that only looks: every op runs as it would, then :meth:`observe` sees
    it under the guard (which passes a :class:`Deliberate` exception on: ``check_numerics``
    raises at the op that made a NaN)."""

    where = "dispatch mode"

    def observe(self, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        """See one op and its output (subclasses)."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not _broken[0]:
            try:
                self.observe(func, args, kwargs, out)
            except Deliberate:
                raise
            except Exception as exc:
                failed(exc, self.where)
        return out


# -- the process ----------------------------------------------------------------------------
def signal_handler(
    signum: int, handler: Callable[..., Any], recover: Callable[..., Any]
) -> Callable[..., Any]:
    """Set ``handler`` for ``signum``; when gradoc fails in it, ``recover(signum, frame)``
    does what the program would have had done. The installed (guarded) handler is returned:
    ``signal.getsignal`` answers it."""
    where = name_of(handler)
    cell = _cell(where)

    def entry(signum: int, frame: Any) -> Any:
        try:
            fault(cell, "before", where)
            return handler(signum, frame)
        except Deliberate:
            raise
        except Exception as exc:
            failed(exc, where)
            return recover(signum, frame)

    setattr(entry, GUARDED, True)
    signal.signal(signum, entry)
    return entry


def restore_signal(signum: int, handler: Any) -> None:
    """Put ``handler`` back for ``signum`` (a handler gradoc replaced, or the default)."""
    signal.signal(signum, handler)


def at_exit(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Call ``fn()`` as the interpreter exits, guarded (its failure changes no exit code and
    prints no traceback of gradoc's). Usable as a decorator; returns ``fn``."""
    atexit.register(guard(fn, always=True))
    return fn
